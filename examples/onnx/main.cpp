// examples/onnx/main.cpp: models in and out of brisk through ONNX. examples/onnx/demo.sh runs
// the whole round: this program trains the main job's CNN and exports it, ONNX Runtime runs the
// file and compares (ort_check.py), PyTorch exports a model of its own (torch_model.py), this
// program imports it, fine-tunes it on Fashion-MNIST and exports it again, and ONNX Runtime
// checks that one too.
//
//   onnx_demo export   [--data DIR] [--out DIR] [--steps N]            -> cnn.onnx, cnn_io.safetensors
//   onnx_demo finetune IN.onnx [--data DIR] [--out DIR] [--steps N]    -> finetuned.onnx, finetuned_io.safetensors
// *_io.safetensors holds a test batch (input) and brisk's output for it (output), for the check.
#include <cstdio>
#include <filesystem>
#include <string>

#include "brisk.h"

using namespace brisk;

namespace {

struct Args {
  std::string mode, model, data = data::FashionMNIST::kDefaultRoot, out = "onnx_out";
  int64_t steps = 300;
};

// Images as the main job feeds them: F32 in [0, 1], normalized with Fashion-MNIST's mean / std.
Tensor images(const data::FashionMNIST& ds, int64_t start, int64_t n) {
  Tensor x = ds.images().narrow(0, start, n).to(DType::F32) / 255.0;
  return (x - 0.2860) / 0.3530;
}

double accuracy(nn::Module& m, const data::FashionMNIST& test) {
  NoGradGuard no_grad;
  m.eval();
  int64_t right = 0;
  const int64_t n = 2000;
  for (int64_t at = 0; at < n; at += 500) {
    Tensor pred = argmax(m(images(test, at, 500)), 1);
    right += sum(eq(pred, test.labels().narrow(0, at, 500)).to(DType::I64)).item<int64_t>();
  }
  m.train();
  return 100.0 * double(right) / double(n);
}

void train(nn::Module& m, const data::FashionMNIST& train_ds, int64_t steps, double lr) {
  optim::Adam opt(m.named_parameters(), {.lr = lr});
  m.train();
  const int64_t batch = 64, n = train_ds.size();
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t at = (s * batch) % (n - batch);
    Tensor loss = nn::functional::cross_entropy(m(images(train_ds, at, batch)), train_ds.labels().narrow(0, at, batch));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

void export_with_io(nn::Module& m, const data::FashionMNIST& test, const std::string& stem) {
  m.eval();
  onnx::export_model(m, {images(test, 0, 2)}, stem + ".onnx",
                     {.dynamic_axes = {{"input", {{0, "batch"}}}, {"output", {{0, "batch"}}}}});
  NoGradGuard no_grad;
  Tensor x = images(test, 0, 100);
  save_safetensors(stem + "_io.safetensors", {{"input", x}, {"output", m(x).contiguous()}});
  std::printf("wrote %s.onnx and %s_io.safetensors (a batch of 100 and brisk's outputs)\n", stem.c_str(), stem.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--data" && i + 1 < argc)
      a.data = argv[++i];
    else if (k == "--out" && i + 1 < argc)
      a.out = argv[++i];
    else if (k == "--steps" && i + 1 < argc)
      a.steps = std::stoll(argv[++i]);
    else if (a.mode.empty())
      a.mode = k;
    else if (a.model.empty())
      a.model = k;
    else
      throw Error("onnx_demo: unexpected argument " + k);
  }
  if (a.mode != "export" && !(a.mode == "finetune" && !a.model.empty())) {
    std::fprintf(stderr,
                 "usage: onnx_demo export [--data DIR] [--out DIR] [--steps N]\n"
                 "       onnx_demo finetune IN.onnx [--data DIR] [--out DIR] [--steps N]\n");
    return 2;
  }
  std::filesystem::create_directories(a.out);
  data::FashionMNIST train_ds(a.data, true), test(a.data, false);
  manual_seed(0);
  if (a.mode == "export") {
    auto cnn = std::make_shared<nn::models::SmallCNN>();
    train(*cnn, train_ds, a.steps, 1e-3);
    std::printf("SmallCNN after %lld steps: %.1f%% on 2,000 test images\n", (long long)a.steps, accuracy(*cnn, test));
    export_with_io(*cnn, test, a.out + "/cnn");
    return 0;
  }
  auto net = onnx::load_model(a.model);
  std::printf("imported %s: %zu parameters tensors, ops:", a.model.c_str(), net->named_parameters().size());
  for (const auto& op : net->op_types()) std::printf(" %s", op.c_str());
  std::printf("\nbefore fine-tuning: %.1f%% on 2,000 test images\n", accuracy(*net, test));
  train(*net, train_ds, a.steps, 1e-3);
  std::printf("after %lld steps of Adam in brisk: %.1f%%\n", (long long)a.steps, accuracy(*net, test));
  export_with_io(*net, test, a.out + "/finetuned");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "onnx_demo: %s\n", e.what());
  return 1;
}
