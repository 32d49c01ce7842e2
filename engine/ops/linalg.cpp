// PLACEHOLDER (being written): matmul.
#include "engine/ops/families.h"
namespace brisk {
namespace detail { void define_linalg_ops() {} }
Tensor matmul(const Tensor&, const Tensor&) { BRISK_FAIL("matmul: not yet implemented"); }
}
