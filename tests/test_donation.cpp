// tests/test_donation.cpp: the operators +, -, * writing into a temporary operand's buffer
// (Note [Donated operands] in engine/ops/elementwise.cpp): the same values and gradients as the
// allocating path, no new allocation when the operand is lent, and no lending where something
// else can still see the operand (a named tensor, a view of a live tensor, a broadcast operand,
// a saved output, a copy, a leaf, an input mul's backward reads, memory the caller owns).
// With the storage's use count left out of the checks, the view, alias and saved-output cases
// fail (exp's backward then reports its saved output changed in place).
#include <doctest/doctest.h>

#include "brisk.h"
#include "engine/allocator.h"

using namespace brisk;

namespace {

// Allocations asked of the CPU allocator so far (fresh or from its cache).
uint64_t allocations() {
  const AllocatorStats s = cpu_allocator().stats();
  return s.system_allocs + s.cache_hits;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Sets donation for a scope.
struct Donation {
  bool previous;
  explicit Donation(bool on) : previous(set_operand_donation(on)) {}
  ~Donation() { set_operand_donation(previous); }
};

// y = h + x @ w or linear(x, w^T) - h (a block's residual) and the gradients of sum(y * c) through both
// operands, with donation on or off.
struct Residual {
  std::vector<double> y, gh, gx, gw;
  bool lent = false;
};
Residual residual(DType t, bool donate, bool lent_to_right) {
  Donation d(donate);
  Generator gen(7);
  Tensor h = randn({3, 4, 5}, t, Device::cpu(), &gen).requires_grad_();
  Tensor x = randn({3, 4, 6}, t, Device::cpu(), &gen).requires_grad_();
  Tensor w = randn({6, 5}, t, Device::cpu(), &gen).requires_grad_();
  Tensor c = randn({3, 4, 5}, t, Device::cpu(), &gen);
  Tensor branch = lent_to_right ? matmul(x, w) : linear(x, w.t());
  const void* p = branch.data_ptr();
  Tensor hh = h * 1.0;  // a non-leaf left operand, so the left one may be lent too
  Tensor y = lent_to_right ? hh + std::move(branch) : std::move(branch) - hh;
  Residual r;
  r.lent = y.data_ptr() == p;
  (y * c).sum().backward();
  r.y = values(y);
  r.gh = values(h.grad());
  r.gx = values(x.grad());
  r.gw = values(w.grad());
  return r;
}

}  // namespace

TEST_CASE("donation: a temporary operand's buffer takes the result, bit for bit as allocating") {
  for (DType t : {DType::F32, DType::F64}) {
    for (bool right : {true, false}) {
      CAPTURE(t);
      CAPTURE(right);
      const Residual on = residual(t, true, right), off = residual(t, false, right);
      CHECK(on.lent);
      CHECK_FALSE(off.lent);
      CHECK(on.y == off.y);
      CHECK(on.gh == off.gh);
      CHECK(on.gx == off.gx);
      CHECK(on.gw == off.gw);
    }
  }
}

TEST_CASE("donation: a lent add asks the allocator for nothing") {
  Tensor h = randn({64, 64});
  Tensor x = randn({64, 64}), w = randn({64, 64});
  Tensor branch = matmul(x, w);
  const void* p = branch.data_ptr();
  const uint64_t before = allocations();
  Tensor y = h + std::move(branch);
  CHECK(allocations() == before);
  CHECK(y.data_ptr() == p);
  CHECK_FALSE(branch.defined());  // given up
  // The named form allocates.
  Tensor z = matmul(x, w);
  const uint64_t before2 = allocations();
  Tensor y2 = h + z;
  CHECK(allocations() == before2 + 1);
  CHECK(values(y2) == values(y));
}

// GPT-2's first add: the token embedding (a view of index_select's rows, whose base is gone)
// plus the position embedding broadcast over the batch.
TEST_CASE("donation: a view that is the last handle on its storage is lent") {
  Generator gen(11);
  Tensor wte = randn({10, 4}, DType::F32, Device::cpu(), &gen).requires_grad_();
  Tensor wpe = randn({3, 4}, DType::F32, Device::cpu(), &gen).requires_grad_();
  Tensor idx = from_vector({1, 5, 2, 9, 0, 5}, {2, 3}, DType::I64);
  Tensor pos = from_vector({0, 1, 2}, {1, 3}, DType::I64);
  auto run = [&](bool donate) {
    Donation d(donate);
    Tensor tok = embedding(wte, idx);
    const void* p = tok.data_ptr();
    Tensor x = std::move(tok) + embedding(wpe, pos);
    CHECK((x.data_ptr() == p) == donate);
    x.sum().backward();
    std::vector<double> r = values(x), g = values(wte.grad()), gp = values(wpe.grad());
    r.insert(r.end(), g.begin(), g.end());
    r.insert(r.end(), gp.begin(), gp.end());
    wte.zero_grad();
    wpe.zero_grad();
    return r;
  };
  CHECK(run(true) == run(false));
}

TEST_CASE("donation: sub and mul write into either operand; mul not while its node saves it") {
  Tensor a = randn({5, 7}), b = randn({5, 7});
  const auto diff = values(a - b), prod = values(a * b);
  {
    Tensor ta = a * 1.0, tb = b * 1.0;
    const void* pb = tb.data_ptr();
    Tensor y = ta - std::move(tb);  // out aliases the right operand
    CHECK(y.data_ptr() == pb);
    CHECK(values(y) == diff);
  }
  {
    Tensor ta = a * 1.0;
    const void* pa = ta.data_ptr();
    Tensor y = std::move(ta) * b;
    CHECK(y.data_ptr() == pa);
    CHECK(values(y) == prod);
  }
  {
    // The other operand transposed (the tiled walk, Note [Tiled elementwise walk] in
    // kernels/cpu/loops.h) and 16-bit floats (read as float, rounded on store) over the alias.
    Tensor big_a = randn({64, 48}), big_b = randn({48, 64});
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      CAPTURE(t);
      Tensor x = big_a.to(t), yt = big_b.to(t).t();
      const auto want = values(x - yt);
      Tensor tx = x * 1.0;
      const void* p = tx.data_ptr();
      Tensor y = std::move(tx) - yt;
      CHECK(y.data_ptr() == p);
      CHECK(values(y) == want);
      Tensor tx2 = x * 1.0;
      Tensor y2 = yt - std::move(tx2);
      CHECK(values(y2) == values(yt - x));
    }
  }
  // Under autograd mul's backward reads both inputs: nothing is lent, the gradients are right.
  Tensor la = a.clone().requires_grad_(), lb = b.clone().requires_grad_();
  Tensor ta = la * 1.0;
  const void* pa = ta.data_ptr();
  Tensor y = std::move(ta) * lb;
  CHECK(y.data_ptr() != pa);
  CHECK(values(y) == prod);
  y.sum().backward();
  CHECK(values(la.grad()) == values(b));
  CHECK(values(lb.grad()) == values(a));
}

TEST_CASE("donation: nothing is lent where another holder could see the operand") {
  Generator gen(3);
  Tensor x = randn({4, 6}, DType::F32, Device::cpu(), &gen);
  Tensor m = randn({4, 6}, DType::F32, Device::cpu(), &gen);
  const auto xv = values(x), mv = values(m);
  const auto sum = values(x + m);
  SUBCASE("a named tensor") {
    Tensor t = m * 1.0;
    Tensor y = x + t;
    CHECK(y.data_ptr() != t.data_ptr());
    CHECK(values(t) == mv);
    CHECK(values(y) == sum);
  }
  SUBCASE("a view of a temporary, a transposed view, a reshaped view") {
    Tensor big = repeat(m, {2, 1});
    Tensor y = x + big.narrow(0, 0, 4);  // an rvalue view over big's storage
    CHECK(values(y) == sum);
    CHECK(values(big.narrow(0, 0, 4)) == mv);
    Tensor mt = m.t().contiguous();
    Tensor y2 = x + mt.t();
    CHECK(values(y2) == sum);
    Tensor flat = m.reshape({24});
    Tensor y3 = x + flat.view({4, 6});
    CHECK(values(y3) == sum);
    CHECK(values(flat) == mv);
  }
  SUBCASE("an operand that would have to broadcast") {
    Tensor row = m.narrow(0, 0, 1).contiguous();
    Tensor r1 = row * 1.0;
    const void* p = r1.data_ptr();
    Tensor y = x + std::move(r1);  // (4, 6) result: the (1, 6) row cannot hold it
    CHECK(y.data_ptr() != p);
    CHECK(values(y) == values(x + row));
  }
  SUBCASE("an operand of another dtype: its cast may be lent, never the operand") {
    Tensor d = m.to(DType::F64) * 1.0;
    const void* p = d.data_ptr();
    Tensor y = x + std::move(d);  // promoted to F64: x's cast is a fresh F64 temporary
    CHECK(y.dtype() == DType::F64);
    CHECK(values(y) == values(x.to(DType::F64) + m.to(DType::F64)));
    Tensor h = m.to(DType::F64);
    Tensor f = x * 1.0;
    const void* pf = f.data_ptr();
    Tensor y2 = std::move(f) + h;  // F32 rvalue, F64 result: F32's buffer cannot hold it
    CHECK(y2.data_ptr() != pf);
    CHECK(values(y2) == values(y));
  }
  SUBCASE("a copy of the handle, a detached alias") {
    Tensor t = m * 1.0;
    Tensor keep = t;
    Tensor y = x + std::move(t);
    CHECK(values(keep) == mv);
    CHECK(values(y) == sum);
    Tensor u = m * 1.0;
    Tensor alias = u.detach();
    Tensor y2 = x + std::move(u);
    CHECK(values(alias) == mv);
    CHECK(values(y2) == sum);
  }
  SUBCASE("a leaf that requires grad") {
    Tensor leaf = m.clone().requires_grad_();
    const void* p = leaf.data_ptr();
    Tensor y = x + std::move(leaf);
    CHECK(y.data_ptr() != p);
    CHECK(values(y) == sum);
  }
  SUBCASE("memory the caller owns (from_blob)") {
    std::vector<float> buf(mv.begin(), mv.end());
    Tensor y = x + from_blob(buf.data(), {4, 6}, DType::F32);
    CHECK(values(y) == sum);
    CHECK(std::vector<double>(buf.begin(), buf.end()) == mv);
  }
  SUBCASE("the same object on both sides") {
    Tensor t = m * 1.0;
    Tensor y = t + std::move(t);
    CHECK(t.defined());
    CHECK(values(y) == values(m * 2.0));
  }
  CHECK(values(x) == xv);
  CHECK(values(m) == mv);
}

// exp and tanh save their output for backward; written over, their gradient would be computed
// from the sum instead (the version check turns that into an error). Nothing may be lent.
TEST_CASE("donation: an output its producer saved for backward is not lent") {
  for (DType t : {DType::F32, DType::F64}) {
    CAPTURE(t);
    Generator gen(5);
    Tensor a = randn({3, 5}, t, Device::cpu(), &gen);
    Tensor b = randn({3, 5}, t, Device::cpu(), &gen);
    auto run = [&](bool donate, bool use_tanh) {
      Donation d(donate);
      Tensor x = a.clone().requires_grad_();
      Tensor y = b + (use_tanh ? tanh(x) : exp(x));
      std::vector<double> g;
      REQUIRE_NOTHROW(y.sum().backward());
      return std::make_pair(values(y), values(x.grad()));
    };
    for (bool use_tanh : {false, true}) {
      CAPTURE(use_tanh);
      const auto on = run(true, use_tanh), off = run(false, use_tanh);
      CHECK(on.first == off.first);
      CHECK(on.second == off.second);
    }
  }
}

TEST_CASE("donation: under BF16 autocast an F32 residual add gives the allocating answer") {
  Generator gen(9);
  Tensor h = randn({4, 8}, DType::F32, Device::cpu(), &gen);
  Tensor x = randn({4, 8}, DType::F32, Device::cpu(), &gen);
  Tensor w = randn({8, 8}, DType::F32, Device::cpu(), &gen);
  auto run = [&](bool donate) {
    Donation d(donate);
    AutocastGuard autocast(DeviceType::CPU, DType::BF16);
    Tensor y = h + matmul(x, w);  // a BF16 product, cast to F32 for the add
    CHECK(y.dtype() == DType::F32);
    return values(y);
  };
  CHECK(run(true) == run(false));
}

// nn::TransformerEncoderLayer / DecoderLayer need no change: x + sa(norm1(x)) and x + ff(x)
// get their branch as an rvalue. Fewer allocations, the same outputs and gradients.
TEST_CASE("donation: a transformer layer's residual branches are lent, with the same answers") {
  for (bool batch_first : {false, true}) {
    for (bool norm_first : {false, true}) {
      CAPTURE(batch_first);
      CAPTURE(norm_first);
      nn::TransformerOptions o;
      o.dim_feedforward = 16;
      o.dropout = 0;
      o.batch_first = batch_first;
      o.norm_first = norm_first;
      nn::TransformerEncoderLayer enc(8, 2, o);
      nn::TransformerDecoderLayer dec(8, 2, o);
      Generator gen(13);
      Tensor src = randn({3, 2, 8}, DType::F32, Device::cpu(), &gen);
      Tensor mem = randn({3, 2, 8}, DType::F32, Device::cpu(), &gen);
      auto run = [&](bool donate, uint64_t& requests) {
        Donation d(donate);
        enc.zero_grad();
        dec.zero_grad();
        const uint64_t r0 = allocations();
        Tensor y = dec.forward(enc(src), mem);
        requests = allocations() - r0;
        y.sum().backward();
        std::vector<double> r = values(y);
        for (const Tensor& p : enc.parameters()) {
          const auto g = values(p.grad());
          r.insert(r.end(), g.begin(), g.end());
        }
        for (const Tensor& p : dec.parameters()) {
          const auto g = values(p.grad());
          r.insert(r.end(), g.begin(), g.end());
        }
        return r;
      };
      uint64_t on = 0, off = 0;
      const auto a = run(true, on), b = run(false, off);
      CHECK(a == b);
      CHECK(on < off);
    }
  }
}
