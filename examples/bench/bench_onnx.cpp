// examples/bench/bench_onnx.cpp: inference time of a model imported from ONNX against the same
// model built by hand in brisk, and ONNX Runtime on the same file, in one run. Each model is
// built in brisk (eval mode, random weights), exported with brisk::onnx::export_model, imported
// back with brisk::onnx::load_model and timed both ways (median of repeats, no grad); ONNX
// Runtime (a Python with onnxruntime: $TORCH_PYTHON, else the venv; skipped with a note when
// absent) runs the exported file with the same input shape and threads.
//
// Usage: bench_onnx [--threads N]
// Prints per model: hand-built ms, imported ms, imported / hand-built, ONNX Runtime ms and
// brisk (hand-built) / ONNX Runtime.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "brisk.h"
#include "examples/bench/bench_common.h"

using namespace brisk;

namespace {

struct Case {
  const char* name;
  std::function<std::shared_ptr<nn::Module>()> make;
  Shape input;
  bool tokens = false;  // integer ids in [0, 1000)
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
  if (threads > 0) set_num_threads(threads);
  const std::vector<Case> cases = {
      {"mlp",
       [] {
         return std::make_shared<nn::models::MLP>(std::vector<int64_t>{784, 512, 256, 10});
       },
       {256, 784}},
      {"small_cnn", [] { return std::make_shared<nn::models::SmallCNN>(); }, {64, 1, 28, 28}},
      {"resnet18", [] { return nn::models::resnet18(1000); }, {8, 3, 112, 112}},
      {"mobilenet_v2", [] { return std::make_shared<nn::models::MobileNetV2>(1000); }, {8, 3, 112, 112}},
      {"transformer_encoder",
       [] {
         nn::TransformerOptions o;
         o.dim_feedforward = 1024;
         o.batch_first = true;
         o.dropout = 0.0;
         return std::make_shared<nn::TransformerEncoder>(std::make_shared<nn::TransformerEncoderLayer>(256, 4, o), 4);
       },
       {8, 128, 256}},
      {"gpt2_small",
       [] {
         return std::make_shared<nn::models::GPT2>(nn::models::GPT2Config{
             .vocab_size = 1000, .n_positions = 128, .n_embd = 256, .n_layer = 4, .n_head = 4, .dropout = 0.0});
       },
       {8, 128},
       true},
  };
  const auto dir = std::filesystem::temp_directory_path() / "bench_onnx";
  std::filesystem::create_directories(dir);
  std::printf("bench_onnx: inference, %d threads; ms per forward (median)\n", get_num_threads());
  std::printf("%-20s %10s %10s %9s %10s %10s\n", "model", "hand-built", "imported", "imp/hand", "onnxrt", "brisk/ort");
  const std::string python = bench::python_for_torch();
  for (const Case& c : cases) {
    manual_seed(0);
    auto model = c.make();
    model->eval();
    Tensor x = c.tokens ? randint(0, 1000, c.input, DType::I64) : randn(c.input);
    const std::string path = (dir / (std::string(c.name) + ".onnx")).string();
    onnx::export_model(*model, {x}, path);
    auto imported = onnx::load_model(path);
    imported->eval();
    NoGradGuard no_grad;
    const double hand = 1e3 * bench::seconds_per_call([&] { bench::keep((*model)(x)); }, 3, 7);
    const double imp = 1e3 * bench::seconds_per_call([&] { bench::keep((*imported)(x)); }, 3, 7);
    double ort = -1;
    if (!python.empty()) {
      std::string shape;
      for (int64_t d : c.input) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      const std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " + python +
                              " - 2>/dev/null <<'BRISK_PY'\n" +
                              "import time, numpy as np\n"
                              "try:\n    import onnxruntime as ort\nexcept ImportError:\n    raise SystemExit(0)\n"
                              "o = ort.SessionOptions(); o.intra_op_num_threads = " +
                              std::to_string(get_num_threads()) +
                              "; o.inter_op_num_threads = 1\n"
                              "s = ort.InferenceSession('" +
                              path + "', o, providers=['CPUExecutionProvider'])\n" + "shape = (" + shape + ",)\n" +
                              (c.tokens ? "x = np.random.randint(0, 1000, shape).astype(np.int64)\n"
                                        : "x = np.random.randn(*shape).astype(np.float32)\n") +
                              "f = lambda: s.run(None, {'input': x})\n"
                              "for _ in range(3): f()\n"
                              "t = []\n"
                              "for _ in range(7):\n    a = time.perf_counter()\n    [f() for _ in range(3)]\n"
                              "    t.append((time.perf_counter() - a) / 3)\n"
                              "print('RESULT ms=%f' % (sorted(t)[3] * 1e3))\nBRISK_PY\n";
      std::string text;
      if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[256];
        while (std::fgets(buf, sizeof buf, p)) text += buf;
        pclose(p);
      }
      ort = bench::tagged_field(text, "RESULT", "ms");
    }
    if (ort > 0) {
      std::printf("%-20s %10.2f %10.2f %9.2f %10.2f %10.2f\n", c.name, hand, imp, imp / hand, ort, hand / ort);
    } else {
      std::printf("%-20s %10.2f %10.2f %9.2f %10s %10s\n", c.name, hand, imp, imp / hand, "-", "-");
    }
    std::fflush(stdout);
  }
  if (python.empty()) std::printf("(ONNX Runtime not run: no Python with onnxruntime)\n");
  return 0;
}
