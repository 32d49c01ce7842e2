// examples/tabular/main.cpp: a tabular regression model trained from a CSV file, end to end.
// Writes a synthetic CSV (numeric columns x1..x3 with missing cells, a categorical "city", a
// target y = linear + nonlinear part + noise, seed fixed) unless --csv names one; loads it with
// CsvDataset; splits train/val; computes the fill and standardization statistics on the TRAIN
// split only; feeds the loader's fused pass (fill_missing, standardize, one_hot); trains an
// MLP with SGD, StepLR and early stopping; and compares its validation MSE with least squares.
//   tabular [--csv FILE --target NAME --categorical NAME] [--out DIR] [--epochs N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "brisk.h"

using namespace brisk;

namespace {

// y = 2 x1 - x2 + 0.5 x3 + city effect + 1.5 x1 x2 + sin(3 x3) + noise; 5% of x2, x3 missing.
void write_csv(const std::string& path, int64_t n) {
  manual_seed(42);
  std::vector<double> x = randn({n, 3}, DType::F64).to_vector<double>();
  std::vector<double> noise = randn({n}, DType::F64).to_vector<double>();
  std::vector<double> gap = rand({n, 2}, DType::F64).to_vector<double>();
  std::vector<int64_t> city = randint(0, 4, {n}).to_vector<int64_t>();
  const char* names[] = {"north", "south", "east", "west"};
  const double effect[] = {1.0, -1.0, 0.5, 0.0};
  std::ofstream out(path);
  out << "x1,x2,x3,city,y\n";
  for (size_t i = 0; i < size_t(n); ++i) {
    double x1 = x[3 * i], x2 = x[3 * i + 1], x3 = x[3 * i + 2];
    double y = 2 * x1 - x2 + 0.5 * x3 + effect[city[i]] + 1.5 * x1 * x2 + std::sin(3 * x3) + 0.1 * noise[i];
    out << x1 << ',' << (gap[2 * i] < 0.05 ? "" : std::to_string(x2)) << ','
        << (gap[2 * i + 1] < 0.05 ? "NA" : std::to_string(x3)) << ',' << names[city[i]] << ',' << y << '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv_path, out = (std::filesystem::temp_directory_path() / "brisk_tabular").string();
  std::string target = "y", categorical = "city";
  int64_t epochs = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--csv")) csv_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
    if (!std::strcmp(argv[i], "--target")) target = argv[i + 1];
    if (!std::strcmp(argv[i], "--categorical")) categorical = argv[i + 1];
    if (!std::strcmp(argv[i], "--epochs")) epochs = std::stoll(argv[i + 1]);
  }
  try {
    if (csv_path.empty()) {
      std::filesystem::create_directories(out);
      csv_path = out + "/synthetic.csv";
      write_csv(csv_path, 2000);
    }
    // 1. Load: y as an F32 regression target, "city" as codes, missing cells kept as NaN.
    data::CsvOptions options{.target = target, .categorical = {categorical}, .target_dtype = DType::F32};
    options.missing = data::CsvMissing::Keep;
    auto csv = std::make_shared<data::CsvDataset>(csv_path, options);
    const int64_t n_val = csv->size() / 5, n_classes = int64_t(csv->categories(categorical).size());
    auto split = data::random_split(csv, {csv->size() - n_val, n_val}, /*seed=*/0);
    // 2. Statistics from the train split only (NaN ignored): fill with the mean, standardize,
    // one-hot the city column in place (its index among the features).
    data::FeatureStats stats = data::feature_stats(*split[0]);
    const auto& names = csv->feature_names();
    const int64_t city = std::find(names.begin(), names.end(), categorical) - names.begin();
    if (city == int64_t(names.size())) throw std::runtime_error("'" + categorical + "' is not a feature");
    data::Compose pipeline({data::fill_missing(stats.mean), data::standardize(stats), data::one_hot(city, n_classes)});
    const int64_t features = pipeline.output_shape({csv->inputs().size(1)})[0];
    std::printf("%lld rows, features %lld -> %lld after one-hot; %lld train, %lld val\n", (long long)csv->size(),
                (long long)csv->inputs().size(1), (long long)features, (long long)split[0]->size(), (long long)n_val);
    data::DataLoader train(split[0], {.batch_size = 64, .shuffle = true, .transform = pipeline});
    Tensor x_val = pipeline.apply_rows(split[1]->inputs()), y_val = split[1]->targets();
    // 3. Baseline: least squares on the same features (no intercept column: the one-hot
    // indicators add up to 1, so they already hold one intercept per city).
    Tensor w = linalg::lstsq(pipeline.apply_rows(split[0]->inputs()), split[0]->targets().unsqueeze(1));
    const double ls_mse = mse_loss(matmul(x_val, w).squeeze(1), y_val).item<double>();
    // 4. The MLP: SGD with momentum, the LR halved every 40 epochs, early stopping on val MSE.
    manual_seed(0);
    nn::models::MLP model({features, 64, 64, 1});
    optim::SGD opt(model.named_parameters(), {.lr = 0.02, .momentum = 0.9});
    optim::StepLR schedule(opt, 40, 0.5);
    optim::EarlyStopping stopper({.patience = 15, .min_delta = 1e-4});
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      model.train();
      for (data::Batch& b : train) {
        Tensor loss = mse_loss(model(b.input).squeeze(1), b.target);
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
      schedule.step();
      model.eval();
      NoGradGuard no_grad;
      const double val_mse = mse_loss(model(x_val).squeeze(1), y_val).item<double>();
      if (epoch % 10 == 0) std::printf("epoch %3lld  val MSE %.4f\n", (long long)epoch, val_mse);
      if (stopper.step(val_mse, &model)) break;
    }
    stopper.restore_best(model);  // the weights of the best epoch
    NoGradGuard no_grad;
    const double mlp_mse = mse_loss(model(x_val).squeeze(1), y_val).item<double>();
    const double mean_mse = mse_loss(full_like(y_val, mean(split[0]->targets()).item<double>()), y_val).item<double>();
    std::printf("val MSE: predict the mean %.4f, least squares %.4f, MLP %.4f (best epoch %lld)\n", mean_mse, ls_mse,
                mlp_mse, (long long)stopper.best_epoch());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tabular: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
