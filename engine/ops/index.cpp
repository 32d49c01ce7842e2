// PLACEHOLDER (being written): cat, stack, index ops.
#include "engine/ops/families.h"
namespace brisk {
namespace detail { void define_index_ops() {} }
}
