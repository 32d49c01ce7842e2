// opcheck/check.cpp: check_op, check_spec and the A/B timing helpers (opcheck/check.h).
#include "opcheck/check.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "engine/threads.h"

namespace brisk::opcheck {

// Note [Op checker]
// One case of one spec is run many times: in F64 against the plain reference; in each other
// dtype of the spec against F64; in each integer dtype the op accepts (floating inputs become
// round(3 x), U8 takes |round(3 x)|) against F64 on the same integer values, exactly when the
// result is an integer tensor; then, in every dtype that ran, with the inputs in each layout
// of opcheck/check.h against the same values dense (a kernel that assumes row-major strides
// fails here: tests/test_opcheck.cpp); finally gradcheck in F64. The layouts are the ones the
// kernel contract (docs/KERNELS.md) says a kernel must take: strided, transposed, permuted, at
// an offset, stride 0. Each layout is applied to every input at once, and for several inputs
// "transposed" also to each input alone (a kernel that checks only in[0] is caught). With
// against_builtin, each of those runs is also repeated with the built-in kernels of the
// spec's ops installed (KernelOverride) and the two results must be equal bit for bit (NaN
// with any payload equals NaN; -0 and +0 differ). A case whose dense inputs the op rejects in
// some dtype or layout is skipped there (the op's infer function decides what is accepted),
// and the report says so; a layout the op rejects when the dense inputs pass is a failure.

namespace {

constexpr DType kIntegerDTypes[] = {DType::I8, DType::U8, DType::I32, DType::I64};

bool layout_applies(const Tensor& t, Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return false;
    case Layout::Strided: return t.dim() > 0 && t.numel() > 0;
    case Layout::Transposed: return t.dim() >= 2;
    case Layout::Permuted: return t.dim() >= 3;
    case Layout::Offset: return true;
    case Layout::Expanded:
      for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.sizes()[size_t(d)] > 1) return true;
      }
      return false;
  }
  return false;
}

Shape reversed_dims(int64_t n) {
  Shape dims;
  for (int64_t d = n - 1; d >= 0; --d) dims.push_back(d);
  return dims;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Row-major index of flat element k, "(1, 2)".
std::string index_of(int64_t k, const Shape& sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    const int64_t n = sizes[d] > 0 ? sizes[d] : 1;
    idx[d] = k % n;
    k /= n;
  }
  std::string s = "(";
  for (size_t d = 0; d < idx.size(); ++d) {
    if (d) s.append(", ");
    s.append(std::to_string(idx[d]));
  }
  s.append(")");
  return s;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// "" when `got` matches `want` (same sizes; |got - want| <= tol (1 + |want|) elementwise, NaN
// where NaN, equal infinities; exact when tol is 0), else the first differing element.
std::string difference(const Tensor& got, const Tensor& want, double tol) {
  if (!(got.sizes() == want.sizes())) {
    std::ostringstream os;
    os << "shape " << got.sizes() << ", expected " << want.sizes();
    return os.str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = std::isnan(g[i]) || std::isnan(w[i])
                          ? std::isnan(g[i]) && std::isnan(w[i])
                          : g[i] == w[i] || std::fabs(g[i] - w[i]) <= tol * (1 + std::fabs(w[i]));
    if (!same && bad++ == 0) first = int64_t(i);
  }
  if (bad == 0) return "";
  std::string s = "element " + index_of(first, got.sizes()) + ": got " + number(g[size_t(first)]) + ", expected " +
                  number(w[size_t(first)]);
  s.append(" (" + std::to_string(bad) + " of " + std::to_string(g.size()) + " elements differ)");
  return s;
}

bool is_nan_at(const Tensor& t, const std::vector<double>& values, size_t i) {
  return is_floating(t.dtype()) && std::isnan(values[i]);
}

// "" when the two are equal bit for bit (NaN payloads aside), else the first difference.
std::string bit_difference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", built-in " + dtype_name(want.dtype());
  if (!(got.sizes() == want.sizes())) return difference(got, want, 0);
  const Tensor g = got.contiguous(), w = want.contiguous();
  const size_t es = size_t(g.element_size()), n = size_t(g.numel());
  if (n == 0 || std::memcmp(g.data_ptr(), w.data_ptr(), n * es) == 0) return "";
  const std::vector<double> gv = g.to_vector<double>(), wv = w.to_vector<double>();
  const auto* gb = static_cast<const unsigned char*>(g.data_ptr());
  const auto* wb = static_cast<const unsigned char*>(w.data_ptr());
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(gb + i * es, wb + i * es, es) == 0) continue;
    if (is_nan_at(g, gv, i) && is_nan_at(w, wv, i)) continue;
    if (bad++ == 0) first = int64_t(i);
  }
  if (bad == 0) return "";
  return "element " + index_of(first, g.sizes()) + ": got " + number(gv[size_t(first)]) + ", built-in " +
         number(wv[size_t(first)]) + " (" + std::to_string(bad) + " of " + std::to_string(n) +
         " elements differ in bits)";
}

// The case's inputs in dtype `t`: floating inputs cast (or, for an integer t, rounded to
// small integers: round(3 x), |round(3 x)| for U8); other inputs unchanged. `twin` receives the
// same values in F64 (the integer values), for the comparison. False when an input has values
// that have no integer counterpart (NaN, infinities, huge).
bool inputs_in(const std::vector<Tensor>& in, DType t, std::vector<Tensor>& out, std::vector<Tensor>& twin) {
  NoGradGuard ng;
  out.clear();
  twin.clear();
  for (const Tensor& x : in) {
    if (!is_floating(x.dtype())) {
      out.push_back(x);
      twin.push_back(x);
      continue;
    }
    if (is_floating(t)) {
      out.push_back(cast(x, t));
      twin.push_back(x);
      continue;
    }
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) {
      if (!std::isfinite(e) || std::fabs(e) > 1e6) return false;
      e = std::round(3 * e);
      if (t == DType::U8) e = std::fabs(e);
      if (e == 0) e = 0;  // no -0 in the F64 twin of an integer
    }
    Tensor f = from_vector(v, x.sizes(), DType::F64);
    twin.push_back(f);
    out.push_back(cast(f, t));
  }
  return true;
}

std::vector<Tensor> laid_out(const std::vector<Tensor>& in, Layout layout, int only = -1) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < in.size(); ++i) out.push_back(only < 0 || int(i) == only ? in_layout(in[i], layout) : in[i]);
  return out;
}

std::vector<Tensor> dense(const std::vector<Tensor>& in) {
  NoGradGuard ng;
  std::vector<Tensor> out;
  for (const Tensor& x : in) out.push_back(x.contiguous().clone());
  return out;
}

// Installs the built-in CPU kernels of `ops` for its lifetime.
class BuiltinKernels {
 public:
  explicit BuiltinKernels(const std::vector<OpId>& ops) {
    for (OpId op : ops) {
      Kernel k = builtin_kernel(op, DeviceType::CPU);
      if (k) guards_.push_back(std::make_unique<KernelOverride>(op, DeviceType::CPU, std::move(k)));
    }
  }
  ~BuiltinKernels() {
    while (!guards_.empty()) guards_.pop_back();  // reverse order of creation
  }

 private:
  std::vector<std::unique_ptr<KernelOverride>> guards_;
};

class Checker {
 public:
  Checker(const OpSpec& spec, const CheckOptions& options, CheckReport& report)
      : spec_(spec), options_(options), report_(report) {}

  void run() {
    ++report_.specs;
    bool replaced = false;
    for (OpId op : spec_.covers) replaced = replaced || is_kernel_replaced(op, DeviceType::CPU);
    builtin_ = options_.against_builtin && replaced;
    if (options_.against_builtin && !replaced) skip("built-in: no kernel of spec " + spec_.name + " is replaced");
    std::vector<OpCase> cases = spec_.cases();
    for (const OpCase& c : cases) {
      ++report_.cases;
      label_ = c.label;
      run_case(c);
    }
  }

 private:
  void fail(const std::string& check, DType t, const std::string& layout, const std::string& detail) {
    ++report_.failed;
    if (int(report_.failures.size()) < options_.max_failures) {
      report_.failures.push_back({spec_.name, label_, check, dtype_name(t), layout, detail});
    }
  }
  void skip(const std::string& what) {
    for (const std::string& s : report_.skipped) {
      if (s == what) return;
    }
    report_.skipped.push_back(what);
  }
  void seen(DType t) {
    for (const std::string& s : report_.dtypes) {
      if (s == dtype_name(t)) return;
    }
    report_.dtypes.push_back(dtype_name(t));
  }
  // One comparison: `diff` is "" on a match.
  void compare(const std::string& check, DType t, const std::string& layout, const std::string& diff) {
    ++report_.comparisons;
    if (!diff.empty()) fail(check, t, layout, diff);
  }

  double tol(DType t) const { return is_floating(t) ? (t == DType::F64 ? 1e-12 : tolerance(spec_, t)) : 0; }

  // Compares `got` (inputs in dtype t) with the F64 result `want` on the same values: within
  // the input dtype's tolerance for a floating result, exactly (after wrapping `want` to the
  // result's width, as integer arithmetic wraps in PyTorch) for an integer or Bool one.
  std::string against_f64(const Tensor& got, const Tensor& want, DType t) const {
    const DType r = got.dtype();
    if (is_floating(r))
      return difference(got, want, is_floating(t) ? tol(t) : r == DType::F64 ? 1e-12 : tolerance(spec_, r));
    return difference(got, wrapped(want, r), 0);
  }

  // F64 integer values as dtype r's arithmetic leaves them (two's complement wrap-around).
  static Tensor wrapped(const Tensor& want, DType r) {
    std::vector<double> v = want.to_vector<double>();
    for (double& e : v) {
      if (!std::isfinite(e) || e != std::trunc(e) || std::fabs(e) > 9e15) continue;  // left to mismatch
      const auto i = static_cast<int64_t>(e);
      switch (r) {
        case DType::I8: e = double(static_cast<int8_t>(static_cast<uint8_t>(i & 0xff))); break;
        case DType::U8: e = double(static_cast<uint8_t>(i & 0xff)); break;
        case DType::I32: e = double(static_cast<int32_t>(static_cast<uint32_t>(i & 0xffffffff))); break;
        case DType::Bool: e = e != 0; break;
        default: break;
      }
    }
    return from_vector(v, want.sizes(), DType::F64);
  }

  void run_case(const OpCase& c) {
    Tensor f64;
    try {
      f64 = spec_.fn(c.inputs);
    } catch (const std::exception& e) {
      fail("error", DType::F64, "", first_line(e.what()));
      return;
    }
    seen(DType::F64);
    if (options_.reference && spec_.reference) {
      compare("reference", DType::F64, "", difference(f64, cast(spec_.reference(c.inputs), DType::F64), 1e-9));
    }
    run_layouts(c.inputs, DType::F64);
    if (options_.dtypes) {
      for (DType t : spec_.dtypes) run_dtype(c, t, f64);
    }
    if (options_.integers && spec_.integers) {
      for (DType t : kIntegerDTypes) run_dtype(c, t, f64);
    }
    if (options_.gradients && spec_.grad) run_gradcheck(c);
  }

  void run_dtype(const OpCase& c, DType t, const Tensor& f64) {
    std::vector<Tensor> in, twin;
    if (!inputs_in(c.inputs, t, in, twin)) return;  // values without an integer counterpart
    Tensor want = is_floating(t) ? f64 : Tensor();
    Tensor got;
    try {
      if (!is_floating(t)) want = cast(spec_.fn(twin), DType::F64);
      got = spec_.fn(in);
    } catch (const std::exception& e) {
      if (is_floating(t)) {
        fail("error", t, "", first_line(e.what()));
      } else {
        skip(std::string(dtype_name(t)) + ": not accepted by " + spec_.name + " (" + first_line(e.what()) + ")");
      }
      return;
    }
    seen(t);
    compare("dtype", t, "", against_f64(got, cast(want, DType::F64), t));
    run_layouts(in, t);
  }

  void run_layouts(const std::vector<Tensor>& in, DType t) {
    if (builtin_) run_builtin(in, t, "contiguous");
    for (Layout layout : options_.layouts) {
      if (layout == Layout::Contiguous) continue;
      run_layout(in, t, layout, -1);
      if (layout == Layout::Transposed && in.size() > 1) {
        for (size_t i = 0; i < in.size(); ++i) run_layout(in, t, layout, int(i));
      }
    }
  }

  void run_layout(const std::vector<Tensor>& in, DType t, Layout layout, int only) {
    bool applies = false;
    for (size_t i = 0; i < in.size(); ++i) {
      if (only < 0 || int(i) == only) applies = applies || layout_applies(in[i], layout);
    }
    if (!applies) return;
    std::string name = layout_name(layout);
    if (only >= 0) name.append(", input " + std::to_string(only) + " only");
    const std::vector<Tensor> laid = laid_out(in, layout, only);
    Tensor want;
    try {
      want = spec_.fn(dense(laid));  // the same values, dense
    } catch (const std::exception&) {
      return;  // values the op rejects (an expanded index list with repeats): not a layout matter
    }
    Tensor got;
    try {
      got = spec_.fn(laid);
    } catch (const std::exception& e) {
      if (!spec_.rejects_layouts) fail("layout", t, name, "rejected the layout: " + first_line(e.what()));
      return;
    }
    compare("layout", t, name, difference(cast(got, DType::F64), cast(want, DType::F64), tol(t)));
    if (builtin_) run_builtin(laid, t, name);
  }

  void run_builtin(const std::vector<Tensor>& in, DType t, const std::string& layout) {
    Tensor got, want;
    std::string error;
    try {
      got = spec_.fn(in);
    } catch (const std::exception& e) {
      error = first_line(e.what());
    }
    try {
      BuiltinKernels builtin(spec_.covers);
      want = spec_.fn(in);
    } catch (const std::exception&) {
      return;  // the built-in kernel rejects it too
    }
    if (!error.empty()) {
      fail("built-in", t, layout, "the built-in runs, the replacement throws: " + error);
      return;
    }
    compare("built-in", t, layout, bit_difference(got, want));
  }

  void run_gradcheck(const OpCase& c) {
    std::vector<Tensor> in;
    bool any = false;
    for (const Tensor& x : c.inputs) {
      in.push_back(leaf(x));
      any = any || in.back().requires_grad();
    }
    if (!any) return;
    GradcheckOptions o = spec_.gradcheck_options;
    o.raise = false;
    try {
      GradcheckReport r = gradcheck_report(spec_.fn, in, o);
      compare("gradient", DType::F64, "", r.ok ? "" : r.str());
    } catch (const std::exception& e) {
      fail("gradient", DType::F64, "", first_line(e.what()));
    }
  }

  const OpSpec& spec_;
  const CheckOptions& options_;
  CheckReport& report_;
  bool builtin_ = false;
  std::string label_;
};

// Times a and b (each returns its own elapsed microseconds) over the options' thread counts.
template <class A, class B>
std::vector<TimingRow> sweep(A&& a, B&& b, const TimingOptions& options) {
  BRISK_CHECK(options.reps > 0 && options.warmup >= 0, "time_ab: reps must be positive and warmup non-negative, got ",
              options.reps, " and ", options.warmup);
  std::vector<int> threads = options.threads;
  if (threads.empty()) threads.push_back(get_num_threads());
  for (int n : threads) BRISK_CHECK(n > 0, "time_ab: thread counts must be positive, got ", n);
  const int before = get_num_threads();
  std::vector<TimingRow> rows;
  try {
    for (int n : threads) {
      set_num_threads(n);
      for (int i = 0; i < options.warmup; ++i) a(), b();
      TimingRow row{n, 1e300, 1e300};
      for (int i = 0; i < options.reps; ++i) {
        row.a_us = std::min(row.a_us, a());
        row.b_us = std::min(row.b_us, b());
      }
      rows.push_back(row);
    }
  } catch (...) {
    set_num_threads(before);
    throw;
  }
  set_num_threads(before);
  return rows;
}

template <class F>
double elapsed_us(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Strided: return "strided";
    case Layout::Transposed: return "transposed";
    case Layout::Permuted: return "permuted";
    case Layout::Offset: return "offset";
    case Layout::Expanded: return "expanded";
  }
  return "?";
}

Tensor in_layout(const Tensor& t, Layout layout) {
  if (!layout_applies(t, layout)) return t;
  NoGradGuard ng;
  const Tensor x = t.detach();
  switch (layout) {
    case Layout::Contiguous: return t;
    case Layout::Strided: return noncontiguous(x);
    case Layout::Transposed: return x.transpose(-1, -2).contiguous().transpose(-1, -2);
    case Layout::Permuted: {
      const Shape rev = reversed_dims(x.dim());
      return x.permute(rev).contiguous().permute(rev);
    }
    case Layout::Offset: {
      constexpr int64_t kOffset = 5;
      Tensor buf = zeros({x.numel() + kOffset}, x.dtype());
      Tensor view = buf.slice(0, kOffset, kOffset + x.numel()).view(x.sizes());
      view.copy_(x);
      return view;
    }
    case Layout::Expanded:
      for (int64_t d = 0; d < x.dim(); ++d) {
        if (x.sizes()[size_t(d)] > 1) return x.slice(d, 0, 1).expand(x.sizes());
      }
      return t;
  }
  return t;
}

std::string CheckReport::str() const {
  std::string s = op + ": " + (ok() ? "ok" : "FAILED") + ", " + std::to_string(specs) + " specs, " +
                  std::to_string(cases) + " cases, " + std::to_string(comparisons) + " comparisons, " +
                  std::to_string(failed) + " failed; dtypes";
  for (const std::string& d : dtypes) s.append(" " + d);
  s.append("\n");
  if (comparisons == 0) s.append("  nothing was compared\n");
  for (const std::string& k : skipped) s.append("  skipped: " + k + "\n");
  for (const CheckFailure& f : failures) {
    s.append("  FAIL " + f.spec + " [" + f.label + "] " + f.check + " " + f.dtype);
    if (!f.layout.empty()) s.append(" (" + f.layout + ")");
    s.append(": " + f.detail + "\n");
  }
  if (failed > int64_t(failures.size()))
    s.append("  ... and " + std::to_string(failed - int64_t(failures.size())) + " more\n");
  return s;
}

CheckReport check_spec(const OpSpec& spec, const CheckOptions& options) {
  CheckReport report;
  report.op = spec.name;
  Checker(spec, options, report).run();
  return report;
}

CheckReport check_op(OpId op, const CheckOptions& options) {
  BRISK_CHECK(int(op) < kNumOps, "check_op: no op with id ", int(op));
  CheckReport report;
  report.op = op_name(op);
  const std::vector<const OpSpec*> specs = specs_for(op);
  if (specs.empty()) report.skipped.push_back(std::string("no spec covers ") + op_name(op));
  for (const OpSpec* spec : specs) Checker(*spec, options, report).run();
  return report;
}

CheckReport check_op(std::string_view op, const CheckOptions& options) { return check_op(op_id(op), options); }

std::vector<TimingRow> time_ab(const std::function<void()>& a, const std::function<void()>& b,
                               const TimingOptions& options) {
  BRISK_CHECK(a && b, "time_ab: both functions must be set");
  return sweep([&] { return elapsed_us(a); }, [&] { return elapsed_us(b); }, options);
}

std::vector<TimingRow> time_against_builtin(OpId op, const std::function<void()>& run, const TimingOptions& options) {
  BRISK_CHECK(run, "time_against_builtin: the function must be set");
  BRISK_CHECK(builtin_kernel(op, DeviceType::CPU), "time_against_builtin: ", op_name(op), " has no CPU kernel");
  auto builtin = [&] {
    BuiltinKernels guard({op});  // installed outside the timed region
    return elapsed_us(run);
  };
  return sweep(
      builtin, [&] { return elapsed_us(run); }, options);
}

std::string timing_table(const std::vector<TimingRow>& rows, std::string_view a_name, std::string_view b_name) {
  char line[160];
  std::snprintf(line, sizeof line, "%8s %14.*s %14.*s %9s\n", "threads", int(a_name.size()), a_name.data(),
                int(b_name.size()), b_name.data(), "speedup");
  std::string s = line;
  for (const TimingRow& r : rows) {
    std::snprintf(line, sizeof line, "%8d %11.1f us %11.1f us %8.3gx\n", r.threads, r.a_us, r.b_us, r.speedup());
    s.append(line);
  }
  return s;
}

}  // namespace brisk::opcheck
