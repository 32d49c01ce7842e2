// tests/test_data_tabular.cpp: data pipelines for tabular data: CsvDataset's options (columns
// by name and index, header or not, categorical columns, missing-value policies, target
// dtypes) and its error messages, datasets as tensors (inputs(), targets()), the feature
// transforms (fill_missing, standardize, min_max, one_hot) against hand-computed values, their
// statistics, and the same transforms inside a DataLoader's fused pass. Not here: the image
// transforms and the loader's threading (tests/test_data.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/readers.h"
#include "data/transforms.h"
#include "nn/models/simple.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace brisk;
using namespace brisk::data;
namespace fs = std::filesystem;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();

// A file t.csv holding `text`, in a folder of its own; removed with the folder.
struct CsvFile {
  explicit CsvFile(const std::string& text, const std::string& name = "t.csv") {
    static int count = 0;
    dir = fs::temp_directory_path() /
          ("brisk_tabular_test_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    fs::create_directories(dir);
    path = (dir / name).string();
    std::ofstream(path) << text;
  }
  ~CsvFile() { fs::remove_all(dir); }
  fs::path dir;
  std::string path;
};

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// NaN-aware equality of value lists.
bool same(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-6) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    if (!std::isnan(a[i]) && std::fabs(a[i] - b[i]) > tol) return false;
  }
  return true;
}

const char* kMixed =
    "age,city,income,label\n"
    "30,paris,1.5,1\n"
    "40,berlin,NA,0\n"
    "50,paris,3.5,1\n"
    ",rome,2.5,0\n";

}  // namespace

TEST_CASE("tabular: CSV columns by name and by index, with and without a header") {
  CsvFile f("a,b,c,y\n1,2,3,0\n4,5,6,1\n");
  CsvDataset by_name(f.path, CsvOptions{.target = "y", .features = {"c", "a"}});
  CHECK(by_name.feature_names() == std::vector<std::string>{"c", "a"});
  CHECK(by_name.target_name() == "y");
  CHECK(values(by_name.inputs()) == std::vector<double>{3, 1, 6, 4});
  CHECK(by_name.inputs().dtype() == DType::F32);
  CsvDataset by_index(f.path, CsvOptions{.target = 3, .features = {2, 0}});
  CHECK(values(by_index.inputs()) == std::vector<double>{3, 1, 6, 4});
  CHECK(values(by_index.targets()) == std::vector<double>{0, 1});
  // Default features: every column but the target, in file order.
  CsvDataset all(f.path, CsvOptions{.target = "b"});
  CHECK(all.feature_names() == std::vector<std::string>{"a", "c", "y"});
  CHECK(values(all.get(1).input) == std::vector<double>{4, 6, 1});
  CHECK(all.columns() == std::vector<std::string>{"a", "b", "c", "y"});

  CsvFile g("1,2,3\n4,5,6\n");
  CsvDataset no_header(g.path, CsvOptions{.target = 0, .header = false});
  CHECK(no_header.columns() == std::vector<std::string>{"0", "1", "2"});
  CHECK(no_header.size() == 2);
  CHECK(values(no_header.targets()) == std::vector<double>{1, 4});
  CHECK(values(CsvDataset(g.path, CsvOptions{.target = "2", .header = false}).targets()) == std::vector<double>{3, 6});
  // Quoted fields, spaces, a semicolon delimiter, F64 inputs.
  CsvFile q("\"x; y\" ; n\n\" 1.5\";  2 \n");
  CsvDataset quoted(q.path, CsvOptions{.delimiter = ';', .input_dtype = DType::F64});
  CHECK(quoted.columns() == std::vector<std::string>{"x; y", "n"});
  CHECK(quoted.inputs().dtype() == DType::F64);
  CHECK(values(quoted.inputs()) == std::vector<double>{1.5, 2});
}

TEST_CASE("tabular: categorical columns become sorted codes and expose the mapping") {
  CsvFile f(kMixed);
  CsvDataset csv(f.path, CsvOptions{.target = "label", .features = {"city"}, .categorical = {"city"}});
  CHECK(csv.categories("city") == std::vector<std::string>{"berlin", "paris", "rome"});
  CHECK(csv.is_categorical("city"));
  CHECK_FALSE(csv.is_categorical("label"));
  CHECK(values(csv.inputs()) == std::vector<double>{1, 0, 1, 2});
  CHECK(csv.code("city", "rome") == 2);
  CHECK(test::error_text([&] { csv.code("city", "oslo"); }).find("no category 'oslo' (it has berlin, paris, rome)") !=
        std::string::npos);
  CHECK(test::error_text([&] {
          csv.categories("label");
        }).find("'label' is not categorical (categorical columns: city)") != std::string::npos);
  // A fixed code list (say, from the training file) keeps codes stable; unknown values are errors.
  CsvOptions fixed{.target = "label", .features = {"city"}};
  fixed.categories["city"] = {"rome", "paris", "berlin"};
  CHECK(values(CsvDataset(f.path, fixed).inputs()) == std::vector<double>{1, 2, 1, 0});
  fixed.categories["city"] = {"rome", "paris"};
  CHECK(test::error_text([&] {
          CsvDataset(f.path, fixed);
        }).find("t.csv:3: value 'berlin' of column 'city' is not one of its categories (rome, paris)") !=
        std::string::npos);
  // A categorical target: class codes, I64 by default.
  CsvDataset by_city(f.path, CsvOptions{.target = "city", .features = {"label"}, .categorical = {"city"}});
  CHECK(by_city.targets().dtype() == DType::I64);
  CHECK(values(by_city.targets()) == std::vector<double>{1, 0, 1, 2});
}

TEST_CASE("tabular: each missing-value policy") {
  CsvFile f(kMixed);
  CsvOptions o{.target = "label", .features = {"age", "income"}};
  // Error (the default) names the file, line, row, column and what to set.
  std::string err = test::error_text([&] { CsvDataset(f.path, o); });
  CHECK(err.find("t.csv:3: missing value ('NA') in data row 1, column 2 'income'") != std::string::npos);
  CHECK(err.find("CsvOptions::missing") != std::string::npos);
  o.missing = CsvMissing::Fill;
  o.fill_value = -1;
  CHECK(values(CsvDataset(f.path, o).inputs()) == std::vector<double>{30, 1.5, 40, -1, 50, 3.5, -1, 2.5});
  o.missing = CsvMissing::Mean;  // age: mean(30, 40, 50) = 40; income: mean(1.5, 3.5, 2.5) = 2.5
  CHECK(values(CsvDataset(f.path, o).inputs()) == std::vector<double>{30, 1.5, 40, 2.5, 50, 3.5, 40, 2.5});
  o.missing = CsvMissing::Keep;
  CHECK(same(values(CsvDataset(f.path, o).inputs()), {30, 1.5, 40, kNan, 50, 3.5, kNan, 2.5}));
  o.missing = CsvMissing::Drop;
  CsvDataset dropped(f.path, o);
  CHECK(dropped.size() == 2);
  CHECK(values(dropped.inputs()) == std::vector<double>{30, 1.5, 50, 3.5});
  CHECK(values(dropped.targets()) == std::vector<double>{1, 1});
  // Custom NA markers: "NA" is then a number error, "?" the missing marker.
  o.missing = CsvMissing::Fill;
  o.na_values = {"", "?"};
  CHECK(test::error_text([&] { CsvDataset(f.path, o); }).find("field 'income' = 'NA' is not a number") !=
        std::string::npos);
  // A categorical column's missing cells are the category "" under Fill and Mean, NaN under Keep.
  CsvFile g("c,y\na,1\n,2\nb,3\n");
  CsvOptions c{.target = "y", .categorical = {"c"}, .missing = CsvMissing::Mean};
  CsvDataset cat(g.path, c);
  CHECK(cat.categories("c") == std::vector<std::string>{"", "a", "b"});
  CHECK(values(cat.inputs()) == std::vector<double>{1, 0, 2});
  c.missing = CsvMissing::Keep;
  CHECK(same(values(CsvDataset(g.path, c).inputs()), {0, kNan, 1}));
  CHECK(CsvDataset(g.path, c).categories("c") == std::vector<std::string>{"a", "b"});
  // A missing target: an error under Fill, NaN under Keep, dropped under Drop.
  CsvFile h("x,y\n1,2\n3,\n");
  CHECK(test::error_text([&] {
          CsvDataset(h.path, CsvOptions{.target = "y", .missing = CsvMissing::Fill});
        }).find("a missing target needs CsvOptions::missing = Keep or Drop") != std::string::npos);
  CsvDataset kept(h.path, CsvOptions{.target = "y", .missing = CsvMissing::Keep});
  CHECK(kept.targets().dtype() == DType::F32);
  CHECK(same(values(kept.targets()), {2, kNan}));
  CHECK(CsvDataset(h.path, CsvOptions{.target = "y", .missing = CsvMissing::Drop}).size() == 1);
  CsvFile all_missing("x,y\nNA,1\n,2\n");
  CHECK(test::error_text([&] {
          CsvDataset(all_missing.path, CsvOptions{.target = "y", .missing = CsvMissing::Mean});
        }).find("column 'x' has no values to take the mean of") != std::string::npos);
}

TEST_CASE("tabular: target dtypes are automatic or chosen") {
  CsvFile f("x,y\n1,2\n3,4\n");
  CHECK(CsvDataset(f.path, CsvOptions{.target = "y"}).targets().dtype() == DType::I64);
  for (DType d : {DType::I64, DType::I32, DType::F32, DType::F64}) {
    Tensor t = CsvDataset(f.path, CsvOptions{.target = "y", .target_dtype = d}).targets();
    CHECK(t.dtype() == d);
    CHECK(values(t) == std::vector<double>{2, 4});
  }
  CsvFile g("x,y\n1,2.5\n3,4\n");
  CHECK(CsvDataset(g.path, CsvOptions{.target = "y"}).targets().dtype() == DType::F32);
  CHECK(test::error_text([&] {
          CsvDataset(g.path, CsvOptions{.target = "y", .target_dtype = DType::I64});
        }).find("t.csv:2: target 'y' = 2.5 is not an integer that fits I64") != std::string::npos);
  CsvFile big("x,y\n1,3000000000\n");
  CHECK(test::error_text([&] {
          CsvDataset(big.path, CsvOptions{.target = "y", .target_dtype = DType::I32});
        }).find("not an integer that fits I32") != std::string::npos);
  CHECK(test::error_text([&] {
          CsvDataset(f.path, CsvOptions{.target = "y", .target_dtype = DType::U8});
        }).find("target_dtype must be I64, I32, F32 or F64") != std::string::npos);
  CHECK(!CsvDataset(f.path, CsvOptions{}).targets().defined());
}

TEST_CASE("tabular: CSV errors name the file, row and column, and list the columns") {
  CsvFile f("alpha,beta,gamma\n1,2,3\n4,x,6\n");
  std::string missing = test::error_text([&] { CsvDataset(f.path, CsvOptions{.target = "label"}); });
  CHECK(missing.find("t.csv: no column 'label'; the file has columns: alpha, beta, gamma") != std::string::npos);
  CHECK(test::error_text([&] {
          CsvDataset(f.path, CsvOptions{.features = {"alpha", "delta"}});
        }).find("no column 'delta'; the file has columns: alpha, beta, gamma") != std::string::npos);
  CHECK(test::error_text([&] {
          CsvDataset(f.path, CsvOptions{.target = 7});
        }).find("column index 7 is out of range; the file has 3 columns: alpha, beta, gamma") != std::string::npos);
  std::string bad = test::error_text([&] { CsvDataset(f.path, CsvOptions{}); });
  CHECK(bad.find("t.csv:3: field 'beta' = 'x' is not a number (data row 1, column 1 'beta')") != std::string::npos);
  CHECK(bad.find("CsvOptions::categorical") != std::string::npos);
  // Unread columns are not parsed: choosing only alpha and gamma reads the file.
  CHECK(CsvDataset(f.path, CsvOptions{.features = {"alpha", "gamma"}}).size() == 2);
  CHECK(test::error_text([&] {
          CsvDataset(f.path, CsvOptions{.target = "alpha", .features = {"alpha"}});
        }).find("'alpha' is both the target and a feature") != std::string::npos);
  CHECK(test::error_text([&] {
          CsvDataset(f.path, CsvOptions{.features = {"alpha"}, .categorical = {"beta"}});
        }).find("categorical column 'beta' is neither a feature nor the target") != std::string::npos);
  CsvFile dup("a,a\n1,2\n");
  CHECK(test::error_text([&] {
          CsvDataset(dup.path, CsvOptions{.target = "a"});
        }).find("column 'a' appears more than once in the header; choose it by index") != std::string::npos);
  CsvFile quote("a,b\n\"1,2\n");
  CHECK(test::error_text([&] { CsvDataset(quote.path, CsvOptions{}); }).find("t.csv:2: a quoted field is not closed") !=
        std::string::npos);
  CHECK(test::error_text([&] { CsvDataset(f.path + ".none", CsvOptions{}); }).find("t.csv.none: cannot open") !=
        std::string::npos);
}

TEST_CASE("tabular: datasets give their samples as tensors where they hold them") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = from_vector({7, 8, 9}, {3}, DType::I64);
  auto base = std::make_shared<TensorDataset>(x, y);
  CHECK(base->has_tensors());
  CHECK(base->inputs().data_ptr() == x.data_ptr());  // no copy
  Subset sub(base, {2, 0});
  CHECK(sub.has_tensors());
  CHECK(values(sub.inputs()) == std::vector<double>{5, 6, 1, 2});
  CHECK(values(sub.targets()) == std::vector<double>{9, 7});
  ConcatDataset both({base, std::make_shared<Subset>(base, std::vector<int64_t>{1})});
  CHECK(values(both.inputs()) == std::vector<double>{1, 2, 3, 4, 5, 6, 3, 4});
  CHECK(values(both.targets()) == std::vector<double>{7, 8, 9, 8});
  CHECK_FALSE(TensorDataset(x, Tensor()).targets().defined());

  // A dataset that only has get(): a clear error, and its Subset says so too.
  struct Lazy : Dataset {
    int64_t size() const override { return 2; }
    Example get(int64_t i) const override { return {full({2}, double(i)), Tensor()}; }
  };
  auto lazy = std::make_shared<Lazy>();
  CHECK_FALSE(lazy->has_tensors());
  CHECK(test::error_text([&] { lazy->inputs(); }).find("Dataset::inputs: this dataset (2 samples) does not hold") !=
        std::string::npos);
  CHECK(test::error_text([&] { lazy->targets(); }).find("Dataset::targets") != std::string::npos);
  CHECK(test::error_text([&] { Subset(lazy, {0}).inputs(); }).find("Subset: its base dataset does not hold") !=
        std::string::npos);
  // Statistics still work sample by sample.
  CHECK(feature_stats(*lazy).mean == std::vector<double>{0.5, 0.5});
}

TEST_CASE("tabular: feature statistics ignore missing values and come from a dataset or a tensor") {
  Tensor x = from_vector({1, 10, 2, kNan, 3, 10, 6, 10}, {4, 2});
  FeatureStats s = feature_stats(x);
  CHECK(s.mean == std::vector<double>{3, 10});
  CHECK(s.std[0] == doctest::Approx(std::sqrt(3.5)));  // population: ((4 + 1 + 0 + 9) / 4)
  CHECK(s.std[1] == 1.0);                              // constant: 1, so standardize accepts it
  CHECK(s.min == std::vector<double>{1, 10});
  CHECK(s.max == std::vector<double>{6, 10});
  CHECK(s.count == std::vector<int64_t>{4, 3});
  // From a train split only: the Subset's rows.
  auto ds = std::make_shared<TensorDataset>(x, Tensor());
  FeatureStats sub = feature_stats(Subset(ds, {0, 2}));
  CHECK(sub.mean == std::vector<double>{2, 10});
  CHECK(test::error_text([&] {
          feature_stats(from_vector({kNan, 1}, {2, 1}).narrow(0, 0, 1));
        }).find("feature 0 has no values") != std::string::npos);
  CHECK(test::error_text([&] { feature_stats(zeros({0, 3})); }).find("no samples") != std::string::npos);
}

TEST_CASE("tabular: each feature transform against hand-computed values") {
  Tensor row = from_vector({1, kNan, 2, 4}, {4});
  auto run = [](const Compose& c, const Tensor& x) {
    std::vector<float> out(size_t(c.output_shape(x.sizes()).numel()));
    c.apply(x, out.data(), 0, 0, 0);
    return std::vector<double>(out.begin(), out.end());
  };
  CHECK(same(run(Compose({fill_missing({9})}), row), {1, 9, 2, 4}));
  CHECK(same(run(Compose({fill_missing({0, 5, 0, 0})}), row), {1, 5, 2, 4}));
  CHECK(same(run(Compose({fill_missing({0, kNan, 0, 0})}), row), {1, kNan, 2, 4}));  // NaN: left missing
  CHECK(same(run(Compose({standardize({1, 0, 1, 2}, {2, 1, 0.5, 4})}), row), {0, kNan, 2, 0.5}));
  CHECK(same(run(Compose({min_max({-1, 0, 2, 2}, {3, 1, 2, 6})}), row), {0.5, kNan, 0, 0.5}));
  // one_hot in place: column 2 (code 2 of 3 classes) -> three indicators between columns 1 and 3.
  CHECK(same(run(Compose({fill_missing({7}), one_hot(2, 3)}), row), {1, 7, 0, 0, 1, 4}));
  CHECK(Compose({one_hot(0, 2), one_hot(2, 3)}).output_shape({4}) == Shape{7});
  CHECK(same(run(Compose({one_hot(0, 2), one_hot(2, 3)}), from_vector({1, 5, 0, 6}, {4})), {0, 1, 5, 1, 0, 0, 6}));
  CHECK(same(run(Compose({one_hot(1, 2)}), row), {1, 0, 0, 2, 4}));  // a missing code: all zeros
  // All together, one_hot column untouched by standardize: (fill, then (x - m) / s, then [0, 1]).
  Compose all({fill_missing({0, 3, 0, 0}), standardize({0, 1, 0, 0}, {1, 2, 1, 2}),
               min_max({0.5, -1, 0, 1}, {1.5, 3, 2, 3}), one_hot(2, 3)});
  CHECK(same(run(all, row), {0.5, 0.5, 0, 0, 1, 0.5}));
  // Integer samples are read as numbers too.
  CHECK(same(run(Compose({standardize({1}, {2})}), from_vector({3, 5}, {2}, DType::I64)), {1, 2}));
}

TEST_CASE("tabular: feature transforms reject wrong sizes, orders and values") {
  auto err = [](auto f) { return test::error_text(f); };
  CHECK(err([] { standardize({0, 0}, {1}); }).find("standardize: mean and std need the same") != std::string::npos);
  CHECK(err([] { standardize({0}, {0}); }).find("std must be positive") != std::string::npos);
  CHECK(err([] { min_max({2}, {1}); }).find("min_max: feature 0 has min 2 > max 1") != std::string::npos);
  CHECK(err([] { one_hot(0, 0); }).find("one_hot: bad column 0 or num_classes 0") != std::string::npos);
  CHECK(err([] { fill_missing({}); }).find("fill_missing: needs one value") != std::string::npos);
  CHECK(err([] {
          Compose({standardize({0}, {1}), fill_missing({0})});
        }).find("must be ordered fill_missing") != std::string::npos);
  CHECK(err([] { Compose({one_hot(1, 2), one_hot(1, 3)}); }).find("one_hot of column 1 twice") != std::string::npos);
  CHECK(err([] { Compose({to_tensor(), standardize({0}, {1})}); }).find("do not mix") != std::string::npos);
  CHECK(err([] {
          Compose({standardize({0, 0, 0}, {1, 1, 1})}).output_shape({4});
        }).find("standardize: 3 means for 4 features") != std::string::npos);
  CHECK(err([] {
          Compose({min_max({0, 0}, {1, 1})}).output_shape({3});
        }).find("min_max: 2 minimums for 3 features") != std::string::npos);
  CHECK(err([] {
          Compose({fill_missing({0, 0})}).output_shape({3});
        }).find("fill_missing: 2 values for 3 features") != std::string::npos);
  CHECK(err([] { Compose({one_hot(5, 2)}).output_shape({3}); }).find("one_hot: column 5 is out of range for 3") !=
        std::string::npos);
  CHECK(err([] {
          Compose({standardize({0}, {1})}).output_shape({1, 28, 28});
        }).find("feature-vector steps need samples (F), got (1, 28, 28)") != std::string::npos);
  std::vector<float> out(8);
  CHECK(err([&] {
          Compose({one_hot(0, 3)}).apply(from_vector({3, 1}, {2}), out.data(), 0, 0, 17);
        }).find("one_hot: sample 17 has 3 in column 0, not a class in 0..2") != std::string::npos);
  CHECK(err([&] {
          Compose({one_hot(0, 3)}).apply(from_vector({0.5, 1}, {2}), out.data(), 0, 0, 0);
        }).find("not a class") != std::string::npos);
  CHECK(err([&] {
          Compose({fill_missing({0})}).apply(ones({2}, DType::Bool), out.data(), 0, 0, 0);
        }).find("feature samples must be F32, F64, I64, I32 or U8") != std::string::npos);
}

TEST_CASE("tabular: transforms in a DataLoader batch equal applying them by hand") {
  CsvFile f(kMixed);
  CsvOptions o{.target = "label", .categorical = {"city"}, .missing = CsvMissing::Keep};
  auto csv = std::make_shared<CsvDataset>(f.path, o);
  REQUIRE(csv->feature_names() == std::vector<std::string>{"age", "city", "income"});
  FeatureStats st = feature_stats(*csv);
  CHECK(st.mean[0] == 40);   // NaN ignored
  CHECK(st.mean[2] == 2.5);  // NaN ignored
  Compose tf({fill_missing(st.mean), standardize(st), one_hot(1, 3)});
  CHECK(tf.for_features());
  for (int workers : {0, 2}) {
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.num_workers = workers;
    lo.transform = tf;
    DataLoader loader(csv, lo);
    Batch b = *loader.next();
    REQUIRE(b.input.sizes() == Shape{4, 5});
    CHECK(b.input.dtype() == DType::F32);
    std::vector<double> expect;
    const std::vector<double> raw = values(csv->inputs());
    for (int r = 0; r < 4; ++r) {
      double age = std::isnan(raw[size_t(r * 3)]) ? 40 : raw[size_t(r * 3)];
      double income = std::isnan(raw[size_t(r * 3 + 2)]) ? 2.5 : raw[size_t(r * 3 + 2)];
      double code = raw[size_t(r * 3 + 1)];
      expect.insert(expect.end(), {(age - 40) / st.std[0], double(code == 0), double(code == 1), double(code == 2),
                                   (income - 2.5) / st.std[2]});
    }
    CHECK(same(values(b.input), expect, 1e-5));
    CHECK(same(values(b.input), values(tf.apply_rows(csv->inputs())), 0));
    CHECK(values(b.target) == std::vector<double>{1, 0, 1, 0});
  }
}

TEST_CASE("tabular: the example's pipeline learns a small regression from a CSV") {
  // y = 3 x0 - 2 x1 + city offset, with missing cells; 200 rows, 30 epochs of a small MLP.
  std::string text = "x0,x1,city,y\n";
  manual_seed(7);
  std::vector<double> x = randn({200, 2}, DType::F64).to_vector<double>();
  const char* cities[] = {"a", "b", "c"};
  for (size_t i = 0; i < 200; ++i) {
    double y = 3 * x[2 * i] - 2 * x[2 * i + 1] + double(i % 3);
    text += std::to_string(x[2 * i]) + "," + (i % 17 == 0 ? "" : std::to_string(x[2 * i + 1])) + "," + cities[i % 3] +
            "," + std::to_string(y) + "\n";
  }
  CsvFile f(text);
  CsvOptions o{.target = "y", .categorical = {"city"}, .target_dtype = DType::F32, .missing = CsvMissing::Keep};
  auto csv = std::make_shared<CsvDataset>(f.path, o);
  auto split = random_split(csv, {160, 40}, 0);
  FeatureStats st = feature_stats(*split[0]);
  Compose tf({fill_missing(st.mean), standardize(st), one_hot(2, 3)});
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.shuffle = true;
  lo.transform = tf;
  DataLoader train(split[0], lo);
  Tensor xv = tf.apply_rows(split[1]->inputs()), yv = split[1]->targets();
  manual_seed(0);
  nn::models::MLP model({5, 32, 1});
  optim::SGD opt(model.named_parameters(), {.lr = 0.02, .momentum = 0.9});
  auto val_mse = [&] {
    NoGradGuard ng;
    return mse_loss(model(xv).squeeze(1), yv).item<double>();
  };
  const double before = val_mse();
  for (int epoch = 0; epoch < 30; ++epoch) {
    for (Batch& b : train) {
      Tensor loss = mse_loss(model(b.input).squeeze(1), b.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  const double after = val_mse();
  CHECK(after < 0.1 * before);
  CHECK(after < 1.0);
}
