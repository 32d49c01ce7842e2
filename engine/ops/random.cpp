// PLACEHOLDER (being written): random ops and factories.
#include "engine/ops/families.h"
namespace brisk {
namespace detail { void define_random_ops() {} }
}
