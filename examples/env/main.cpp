// examples/env/main.cpp: brisk_env, the environment report as a program (like PyTorch's
// `python -m torch.utils.collect_env`): what this machine has and what brisk was built with.
//   brisk_env               the full report
//   brisk_env --dtype bf16  also checks that every device runs BF16 (or f16) natively; the
//                           exit status is 1 when one does not
//   brisk_env --no-libraries   skip opening cuBLASLt/cuDNN for their versions
#include <cstdio>
#include <cstring>

#include "brisk.h"
#include "engine/env.h"
#ifdef BRISK_WITH_DIST
#include "dist/process_group.h"
#endif

int main(int argc, char** argv) {
  brisk::EnvOptions options;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      ++i;
      if (!std::strcmp(argv[i], "bf16")) {
        options.check_dtype = brisk::DType::BF16;
      } else if (!std::strcmp(argv[i], "f16")) {
        options.check_dtype = brisk::DType::F16;
      } else {
        std::fprintf(stderr, "brisk_env: --dtype takes bf16 or f16, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--no-libraries")) {
      options.libraries = false;
    } else {
      std::fprintf(stderr, "usage: brisk_env [--dtype bf16|f16] [--no-libraries]\n");
      return 2;
    }
  }
#ifdef BRISK_WITH_DIST
  (void)brisk::dist::is_nccl_available();  // links dist, whose sections (mpi, nccl) join the report
#endif
  brisk::EnvReport report = brisk::env_report(options);
  std::fputs(report.to_string().c_str(), stdout);
  return report.all_checks_ok() ? 0 : 1;
}
