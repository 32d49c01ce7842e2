// tests/test_onnx_conformance.cpp: ONNX's own backend tests (Debian's libonnx-testdata: node,
// pytorch-converted, pytorch-operator, simple) run through brisk::onnx::load_model and compared
// as ONNX's runner does (numpy's allclose, rtol 1e-3, atol 1e-7, NaNs equal; dtypes and shapes
// must match). Each case passes, fails, or is unsupported (refused by the importer with
// UnsupportedError); tests/data/onnx/conformance_expected.txt lists every case that does not
// pass with its reason, and any change either way fails the test, naming the cases.
// Writes to $TMPDIR: onnx_conformance_actual.txt (the list as it now is: copy it over the
// expected file after a deliberate change; onnx_roundtrip_actual.txt the same for
// tests/data/onnx/roundtrip_expected.txt) and onnx.md (the supported-op table: copy it to
// docs/onnx.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/serialize.h"
#include "interop/onnx_export.h"
#include "interop/onnx_import.h"
#include "paths.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = "/usr/share/libonnx-testdata/data";
const std::vector<std::string> kSuites = {"node", "pytorch-converted", "pytorch-operator", "simple"};

struct Outcome {
  std::string status;  // pass, fail, unsupported
  std::string reason;
};

// One line, at most 200 characters: the reason column of the expected list.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// numpy.testing's rule (ONNX's runner): |got - want| <= atol + rtol * |want|, NaN equal to NaN.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) return one_line(detail::cat("dtype ", got.dtype(), ", expected ", want.dtype()));
  if (got.sizes() != want.sizes()) return one_line(detail::cat("shape ", got.sizes(), ", expected ", want.sizes()));
  std::vector<double> a = got.to_vector<double>();
  std::vector<double> b = want.to_vector<double>();
  size_t bad = 0;
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k]) && std::isnan(b[k])) continue;
    if (a[k] == b[k]) continue;  // infinities of the same sign
    double diff = std::abs(a[k] - b[k]);
    if (!(diff <= 1e-7 + 1e-3 * std::abs(b[k]))) {
      ++bad;
      worst = std::isnan(diff) ? diff : std::max(worst, diff);
    }
  }
  if (bad == 0) return "";
  return detail::cat(bad, " of ", a.size(), " values differ (max |diff| ", worst, ")");
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  }
  // input_10.pb after input_9.pb
  std::sort(out.begin(), out.end(), [&](const fs::path& x, const fs::path& y) {
    std::string a = x.stem().string(), b = y.stem().string();
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return out;
}

Outcome run_case(const fs::path& dir) {
  std::shared_ptr<onnx::OnnxModel> model;
  try {
    model = onnx::load_model((dir / "model.onnx").string());
  } catch (const onnx::UnsupportedError& e) {
    return {"unsupported", one_line(e.what())};
  } catch (const std::exception& e) {
    return {"fail", one_line(detail::cat("load: ", e.what()))};
  }
  NoGradGuard no_grad;
  std::vector<fs::path> sets = sorted_files(dir, "test_data_set_");
  if (sets.empty()) return {"fail", "no test data sets"};
  for (const fs::path& set : sets) {
    try {
      std::vector<fs::path> ins = sorted_files(set, "input_");
      std::vector<fs::path> outs = sorted_files(set, "output_");
      const auto& names = model->input_names();
      if (ins.size() != names.size()) {
        return {"fail", detail::cat(ins.size(), " input files for ", names.size(), " graph inputs")};
      }
      nn::TensorDict inputs;
      for (size_t k = 0; k < ins.size(); ++k) inputs.set(names[k], onnx::load_tensor(ins[k].string()));
      nn::TensorDict got = model->forward_dict(inputs);
      if (outs.size() != got.size()) return {"fail", detail::cat(got.size(), " outputs, expected ", outs.size())};
      for (size_t k = 0; k < outs.size(); ++k) {
        std::string diff = compare(got.items()[k].second, onnx::load_tensor(outs[k].string()));
        if (!diff.empty()) return {"fail", detail::cat("output ", k, ": ", diff)};
      }
    } catch (const onnx::UnsupportedError& e) {
      return {"unsupported", one_line(e.what())};
    } catch (const std::exception& e) {
      return {"fail", one_line(e.what())};
    }
  }
  return {"pass", ""};
}

// "<suite>/<case>" -> (status, reason)
std::map<std::string, Outcome> read_expected(const fs::path& path) {
  std::map<std::string, Outcome> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name, status, reason;
    s >> name >> status;
    std::getline(s, reason);
    out[name] = {status, reason.empty() ? reason : reason.substr(1)};
  }
  return out;
}

struct OpCount {
  int pass = 0, fail = 0, unsupported = 0;
};

}  // namespace

TEST_CASE("onnx conformance: ONNX's backend tests give exactly the expected passes, failures and refusals") {
  if (!fs::exists(kRoot)) {
    MESSAGE("ONNX's backend tests are not installed (" << kRoot << ", Debian's libonnx-testdata): skipped");
    return;
  }
  std::map<std::string, Outcome> expected = read_expected(test::data_dir() / "onnx" / "conformance_expected.txt");
  std::map<std::string, Outcome> actual;
  std::map<std::string, OpCount> by_op;
  std::vector<std::string> changes;
  std::set<std::string> supported;
  for (const auto& op : onnx::supported_ops()) supported.insert(op.op_type);
  for (const std::string& suite : kSuites) {
    int pass = 0, fail = 0, unsupported = 0;
    std::set<std::string> suite_ops;
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(kRoot / suite)) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    for (const fs::path& dir : cases) {
      std::string name = suite + "/" + dir.filename().string();
      Outcome got = run_case(dir);
      actual[name] = got;
      (got.status == "pass" ? pass : got.status == "fail" ? fail : unsupported)++;
      std::vector<std::string> ops;
      try {
        ops = onnx::model_op_types((dir / "model.onnx").string());
      } catch (const std::exception&) {
      }
      for (const std::string& op : ops) {
        suite_ops.insert(op);
        OpCount& c = by_op[op];
        (got.status == "pass" ? c.pass : got.status == "fail" ? c.fail : c.unsupported)++;
      }
      auto it = expected.find(name);
      std::string want = it == expected.end() ? "pass" : it->second.status;
      if (want != got.status) {
        changes.push_back(name + ": expected " + want + ", now " + got.status +
                          (got.reason.empty() ? "" : " (" + got.reason + ")"));
      }
    }
    int64_t known = std::count_if(suite_ops.begin(), suite_ops.end(),
                                  [&](const std::string& op) { return supported.count(op) != 0; });
    MESSAGE("onnx conformance, " << suite << ": " << pass << " passed, " << fail << " failed, " << unsupported
                                 << " unsupported of " << cases.size() << "; " << known << " of its "
                                 << suite_ops.size() << " op types supported");
  }
  for (const auto& kv : expected) {
    if (!actual.count(kv.first))
      changes.push_back(kv.first + ": listed as expected " + kv.second.status + " but no such case");
  }
  MESSAGE("onnx conformance: the importer supports " << supported.size() << " ONNX op types");

  fs::path tmp = fs::temp_directory_path();
  {
    std::ofstream f(tmp / "onnx_conformance_actual.txt");
    f << "# tests/data/onnx/conformance_expected.txt: every ONNX backend-test case that does not pass, with why\n"
      << "# (<suite>/<case> <fail|unsupported> <reason>); written by tests/test_onnx_conformance.cpp.\n";
    for (const auto& kv : actual) {
      if (kv.second.status != "pass") f << kv.first << " " << kv.second.status << " " << kv.second.reason << "\n";
    }
  }
  {
    std::ofstream f(tmp / "onnx.md");
    f << "# ONNX import: supported ops\n\n"
      << "`brisk::onnx::load_model(path)` (interop/onnx_import.h) runs these ONNX ops (domain ai.onnx) with\n"
      << "brisk's own ops, so imported graphs have autograd and run on every device. \"Versions\" are the op's\n"
      << "ONNX schema versions the importer handles (a model's opset selects one); pass / fail / unsupported\n"
      << "count the cases of ONNX's backend tests (Debian's libonnx-testdata, ONNX 1.12) that use the op:\n"
      << "a case counts under every op of its graph, so a case refused for another op shows as unsupported\n"
      << "here too. The expected result of every case is tests/data/onnx/conformance_expected.txt.\n\n"
      << "Generated by tests/test_onnx_conformance.cpp, which writes it to `$TMPDIR/onnx.md`; to\n"
      << "regenerate: `ctest --test-dir <build> -R test_onnx_conformance`, then copy\n"
      << "`<build>/tests/tmp/test_onnx_conformance/onnx.md` here.\n\n"
      << "| op | versions | pass | fail | unsupported |\n|---|---|---|---|---|\n";
    for (const auto& op : onnx::supported_ops()) {
      const OpCount& c = by_op[op.op_type];
      f << "| " << op.op_type << " | " << op.first_opset << "-" << op.last_opset << " | " << c.pass << " | " << c.fail
        << " | " << c.unsupported << " |\n";
    }
    f << "\n"
      << supported.size() << " op types. Not supported (load_model refuses them, naming the node, op type and "
      << "opset), among the ops of ONNX's backend tests:\n\n";
    std::string sep;
    for (const auto& kv : by_op) {
      if (!supported.count(kv.first)) {
        f << sep << kv.first;
        sep = ", ";
      }
    }
    f << "\n";
  }
  for (const std::string& c : changes) MESSAGE(c);
  CHECK_MESSAGE(changes.empty(), changes.size() << " cases changed; see the messages above and "
                                                << (tmp / "onnx_conformance_actual.txt").string());
}

// The round trip: each node case the importer passes is exported again by brisk
// (interop/onnx_export.h, with the case's own inputs), imported again, and must still give the
// case's expected outputs; a written model that computes something else fails. The cases the
// exporter cannot write are tests/data/onnx/roundtrip_expected.txt, with the reason for each
// (now none): a case that starts or stops exporting fails the test. tests/onnx_ort_check.sh runs
// the written models in ONNX Runtime.
TEST_CASE("onnx conformance: node cases exported again by brisk still pass") {
  if (!fs::exists(kRoot)) {
    MESSAGE("ONNX's backend tests are not installed (" << kRoot << "): skipped");
    return;
  }
  std::map<std::string, Outcome> expected = read_expected(test::data_dir() / "onnx" / "conformance_expected.txt");
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kRoot / "node")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int passing = 0, exported = 0;
  std::map<std::string, int> not_exported;         // reason -> cases
  std::map<std::string, std::string> not_written;  // case -> reason
  std::vector<std::string> wrong;
  const fs::path tmp = fs::temp_directory_path() / "onnx_roundtrip.onnx";
  // With $BRISK_ONNX_ROUNDTRIP_DIR the re-exported models, their inputs and expected outputs
  // are kept there for ONNX Runtime (tests/onnx_ort_check.sh).
  const char* keep = std::getenv("BRISK_ONNX_ROUNDTRIP_DIR");
  for (const fs::path& dir : cases) {
    if (expected.count("node/" + dir.filename().string())) continue;  // not a passing case
    ++passing;
    NoGradGuard no_grad;
    auto model = onnx::load_model((dir / "model.onnx").string());
    const fs::path set = sorted_files(dir, "test_data_set_").front();
    std::vector<Tensor> inputs;
    for (const fs::path& in : sorted_files(set, "input_")) inputs.push_back(onnx::load_tensor(in.string()));
    std::vector<fs::path> outs = sorted_files(set, "output_");
    try {
      onnx::export_model(*model, inputs, tmp.string(), {.input_names = model->input_names()});
    } catch (const std::exception& e) {
      std::string why = e.what();
      const size_t op = why.find("of the forward, ");
      why = op == std::string::npos ? one_line(why) : why.substr(op + 16, why.find(' ', op + 16) - op - 16);
      not_exported[why]++;
      not_written["node/" + dir.filename().string()] = one_line(e.what());
      if (why.rfind("export_model: ONNX's checker", 0) == 0) wrong.push_back(dir.filename().string() + ": " + why);
      continue;
    }
    ++exported;
    try {
      auto again = onnx::load_model(tmp.string());
      nn::TensorDict d;
      for (size_t k = 0; k < inputs.size(); ++k) d.set(again->input_names()[k], inputs[k]);
      const nn::TensorDict got = again->forward_dict(d);
      std::string diff = got.size() == outs.size() ? "" : detail::cat(got.size(), " outputs, expected ", outs.size());
      for (size_t k = 0; diff.empty() && k < outs.size(); ++k) {
        diff = compare(got.items()[k].second, onnx::load_tensor(outs[k].string()));
        if (!diff.empty()) diff = detail::cat("output ", k, ": ", diff);
      }
      if (!diff.empty()) wrong.push_back(dir.filename().string() + ": " + diff);
      if (keep) {
        const std::string stem = (fs::path(keep) / dir.filename()).string();
        fs::copy_file(tmp, stem + ".onnx", fs::copy_options::overwrite_existing);
        NamedTensors io;
        for (size_t k = 0; k < inputs.size(); ++k) io.emplace_back(again->input_names()[k], inputs[k].contiguous());
        for (size_t k = 0; k < outs.size(); ++k)
          io.emplace_back("expected_output_" + std::to_string(k), onnx::load_tensor(outs[k].string()).contiguous());
        save_safetensors(stem + ".safetensors", io);
      }
    } catch (const std::exception& e) {
      wrong.push_back(dir.filename().string() + ": " + one_line(e.what()));
    }
  }
  std::ostringstream reasons;
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& kv : not_exported) sorted.emplace_back(-kv.second, kv.first);
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size() && k < 12; ++k)
    reasons << (k ? ", " : "") << sorted[k].second << " " << -sorted[k].first;
  MESSAGE("onnx round trip: of " << passing << " passing node cases " << exported
                                 << " export again and give the expected outputs after re-import; not exported: "
                                 << reasons.str());
  for (const std::string& w : wrong) MESSAGE(w);
  CHECK_MESSAGE(wrong.empty(), wrong.size() << " re-exported node cases compute something else");
  fs::remove(tmp);
  // The cases the exporter cannot write are checked in with the reason, as the conformance
  // list: a case that starts or stops exporting fails the test by name.
  std::map<std::string, Outcome> listed = read_expected(test::data_dir() / "onnx" / "roundtrip_expected.txt");
  std::vector<std::string> changes;
  for (const auto& [name, why] : not_written)
    if (!listed.count(name)) changes.push_back(name + ": no longer exports (" + why + ")");
  for (const auto& kv : listed)
    if (!not_written.count(kv.first)) changes.push_back(kv.first + ": listed as not exported, but now exports");
  {
    std::ofstream f(fs::temp_directory_path() / "onnx_roundtrip_actual.txt");
    f << "# tests/data/onnx/roundtrip_expected.txt: the passing node cases that brisk's exporter cannot write\n"
      << "# again (<suite>/<case> unexported <reason>); written by tests/test_onnx_conformance.cpp.\n";
    for (const auto& [name, why] : not_written) f << name << " unexported " << why << "\n";
  }
  for (const std::string& c : changes) MESSAGE(c);
  CHECK_MESSAGE(changes.empty(), changes.size() << " round-trip cases changed; see the messages above and "
                                                << (fs::temp_directory_path() / "onnx_roundtrip_actual.txt").string());
}
