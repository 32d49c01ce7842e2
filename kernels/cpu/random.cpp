// PLACEHOLDER (being written)
#include "kernels/cpu/register.h"
namespace brisk::kernels::cpu { void register_random() {} }
