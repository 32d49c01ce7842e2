// interop/pickle.cpp: the bounded unpickler (see interop/pickle.h).
//
// Note [A bounded unpickler]
// Python's unpickler is a stack machine whose GLOBAL and REDUCE opcodes import and call any
// function: loading a pickle runs code. This one knows a fixed list of globals (the tensor
// rebuild functions, OrderedDict, torch.Size and the typed storage classes), each mapped to
// a C++ action on plain values; any other global is an error naming it, before anything runs.
// Its costs are bounded by the program's size: every opcode reads at least one byte and
// pushes at most one value (so memory is a small multiple of the size, and time linear);
// strings and ints are read only after their length is checked against the bytes left; the
// memo is a map (an index of 2^32 allocates nothing); containers live in arenas and are
// referred to by index, so a container that holds itself or a chain a million deep costs no
// recursion while it is built. Only the final conversion to TorchValue recurses, up to
// kPickleMaxDepth, and it charges every value it copies against a budget (a list that holds
// the same list twice, 40 times over, would otherwise expand to 2^40). Tensors are views whose
// last element must lie inside their storage, checked with overflow-safe arithmetic.
#include "interop/pickle.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"

namespace brisk::interop {

namespace {

// The globals this unpickler knows: what torch.save writes for tensors and containers.
enum class Global : uint8_t {
  OrderedDict,                // collections.OrderedDict: () -> an empty dict (items follow)
  RebuildTensor,              // torch._utils._rebuild_tensor_v2
  RebuildParameter,           // torch._utils._rebuild_parameter
  RebuildParameterWithState,  // torch._utils._rebuild_parameter_with_state
  TorchSize,                  // torch.Size: (ints,) -> a tuple
  StorageType,                // torch.FloatStorage and kin: names a dtype in persistent ids
};

// The typed storage classes and the brisk dtype of each; any other is refused by name.
// clang-format off
struct StorageClass { const char* name; DType dtype; };
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", DType::F32},   {"DoubleStorage", DType::F64}, {"HalfStorage", DType::F16},
    {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
    {"CharStorage", DType::I8},     {"ByteStorage", DType::U8},    {"BoolStorage", DType::Bool},
};
// clang-format on

// A view may have more elements than its storage (stride 0, overlaps) up to this many.
constexpr int64_t kMaxExpand = int64_t(1) << 24;

// A value on the machine's stack, in the memo or in a container: scalars inline, everything
// else an index into one of the Machine's arenas.
struct Val {
  enum class Kind : uint8_t { None, Bool, Int, Float, Str, Bytes, Tensor, List, Tuple, Dict, Global, Storage };
  Kind kind = Kind::None;
  int64_t i = 0;             // Bool, Int; the arena index of the others; Global: its Global
  double f = 0;              // Float
  DType dtype = DType::F32;  // Global::StorageType
};
using K = Val::Kind;

const char* kind_name(K kind) {
  switch (kind) {
    case K::None: return "None";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::Str: return "str";
    case K::Bytes: return "bytes";
    case K::Tensor: return "Tensor";
    case K::List: return "list";
    case K::Tuple: return "tuple";
    case K::Dict: return "dict";
    case K::Global: return "global";
    case K::Storage: return "storage";
  }
  return "?";
}

// "an int", "a list", "None": for messages.
std::string a(K kind) {
  const std::string name = kind_name(kind);
  if (kind == K::None) return name;
  return (name[0] == 'i' ? "an " : "a ") + name;
}

// A dict's entries in insertion order; the key index lives in the Machine (one map for all
// dicts, so an empty dict costs one vector).
using Dict = std::vector<std::pair<Val, Val>>;

struct LoadedStorage {
  Storage storage;
  DType dtype;
  int64_t numel;
};

// Names of the opcodes that exist in pickle but that torch.save never writes: the error says
// which one it met.
const char* refused_opcode_name(uint8_t op) {
  switch (op) {
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'P': return "PERSID";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 'd': return "DICT";
    case 'l': return "LIST";
    default: return nullptr;
  }
}

class Machine {
 public:
  Machine(std::string_view program, const StorageLoader& load_storage, const std::string& what)
      : p_(program), load_storage_(load_storage), what_(what) {}

  TorchValue run() {
    for (;;) {
      op_at_ = pos_;
      const uint8_t op = u8();
      if (op == '.') break;  // STOP
      step(op);
    }
    check(!stack_.empty(), "STOP with an empty stack");
    // 64 MiB plus 16 bytes per program byte: far above what any torch.save pickle expands to.
    budget_ = (int64_t(64) << 20) + 16 * int64_t(p_.size());
    return convert(stack_.back(), 0);
  }

 private:
  // ---- errors and reading
  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    BRISK_FAIL(what_, ": at byte ", op_at_, ": ", args...);
  }
  template <class... Args>
  void check(bool ok, const Args&... args) const {
    if (!ok) fail(args...);
  }

  void need(uint64_t n) const {
    check(n <= p_.size() - pos_, "needs ", n, " bytes, ", p_.size() - pos_, " left (truncated or corrupt)");
  }
  uint8_t u8() {
    need(1);
    return uint8_t(p_[pos_++]);
  }
  // n bytes little-endian, as unsigned.
  uint64_t le(int n) {
    need(n);
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= uint64_t(uint8_t(p_[pos_ + k])) << (8 * k);
    pos_ += n;
    return v;
  }
  std::string bytes(uint64_t n) {
    need(n);
    std::string s(p_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A GLOBAL operand: text up to a newline.
  std::string line() {
    const size_t end = p_.find('\n', pos_);
    check(end != std::string_view::npos, "GLOBAL without a newline (truncated or corrupt)");
    std::string s(p_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  // ---- the stack, marks and memo
  void push(Val v) { stack_.push_back(v); }
  Val pop() {
    check(stack_.size() > stack_floor(), "pops an empty stack (or past a MARK)");
    Val v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Val& top() {
    check(stack_.size() > stack_floor(), "needs a value on the stack");
    return stack_.back();
  }
  size_t stack_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // The values above the last MARK, removed from the stack along with the mark.
  std::vector<Val> pop_mark() {
    check(!marks_.empty(), "needs a MARK");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<Val> items(stack_.begin() + at, stack_.end());
    stack_.resize(at);
    return items;
  }
  void memo_put(uint64_t index) { memo_[index] = top(); }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    check(it != memo_.end(), "memo entry ", index, " was never stored");
    push(it->second);
  }

  // ---- arena values
  Val str(std::string s, K kind = K::Str) {
    strings_.push_back(std::move(s));
    return {.kind = kind, .i = int64_t(strings_.size() - 1)};
  }
  Val seq(std::vector<Val> items, K kind) {
    seqs_.push_back(std::move(items));
    return {.kind = kind, .i = int64_t(seqs_.size() - 1)};
  }
  Val dict() {
    dicts_.emplace_back();
    return {.kind = K::Dict, .i = int64_t(dicts_.size() - 1)};
  }
  Val global(Global g, DType dtype = DType::F32) { return {.kind = K::Global, .i = int64_t(g), .dtype = dtype}; }
  const std::string& str_of(const Val& v) const { return strings_[v.i]; }
  std::vector<Val>& seq_of(const Val& v) { return seqs_[v.i]; }

  void set_item(const Val& target, const Val& key, const Val& value) {
    if (target.kind != K::Dict) fail("SETITEM on ", a(target.kind), ", not a dict");
    // Python semantics: setting a key again replaces its value in place.
    Dict& d = dicts_[target.i];
    if (key.kind != K::Str && key.kind != K::Int)
      fail("a dict key of type ", kind_name(key.kind), " (only str and int keys are read)");
    std::string id(reinterpret_cast<const char*>(&target.i), sizeof(target.i));
    id += key.kind == K::Str ? 's' : 'i';
    id += key.kind == K::Str ? str_of(key) : std::string(reinterpret_cast<const char*>(&key.i), sizeof(key.i));
    const size_t slot = dict_keys_.try_emplace(std::move(id), d.size()).first->second;
    if (slot == d.size()) {
      d.emplace_back(key, value);
    } else {
      d[slot].second = value;
    }
  }
  void append(const Val& target, const Val& value) {
    if (target.kind != K::List) fail("APPEND to ", a(target.kind), ", not a list");
    seq_of(target).push_back(value);
  }

  // ---- the opcodes
  void step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t version = u8();
        check(version >= 2 && version <= 5, "pickle protocol ", int(version), " (torch.save writes 2 to 5)");
        return;
      }
      case 0x95: le(8); return;  // FRAME: a read-ahead hint
      case '(': marks_.push_back(stack_.size()); return;
      case ')': push(seq({}, K::Tuple)); return;
      case 't': push(seq(pop_mark(), K::Tuple)); return;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const size_t n = op - 0x84;
        check(stack_.size() >= stack_floor() + n, "TUPLE", n, " needs ", n, " values");
        std::vector<Val> items(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        push(seq(std::move(items), K::Tuple));
        return;
      }
      case ']': push(seq({}, K::List)); return;
      case '}': push(dict()); return;
      case 'a': {
        const Val v = pop();
        append(top(), v);
        return;
      }
      case 'e': {  // APPENDS
        std::vector<Val> items = pop_mark();
        const Val target = top();
        for (const Val& v : items) append(target, v);
        return;
      }
      case 's': {
        const Val value = pop();
        const Val key = pop();
        set_item(top(), key, value);
        return;
      }
      case 'u': {  // SETITEMS
        std::vector<Val> items = pop_mark();
        check(items.size() % 2 == 0, "SETITEMS with an odd number of values");
        const Val target = top();
        for (size_t k = 0; k < items.size(); k += 2) set_item(target, items[k], items[k + 1]);
        return;
      }
      case 'N': push({}); return;
      case 0x88: push({.kind = K::Bool, .i = 1}); return;
      case 0x89: push({.kind = K::Bool, .i = 0}); return;
      case 'J': push({.kind = K::Int, .i = int64_t(int32_t(uint32_t(le(4))))}); return;
      case 'K': push({.kind = K::Int, .i = int64_t(le(1))}); return;
      case 'M': push({.kind = K::Int, .i = int64_t(le(2))}); return;
      case 0x8a: push({.kind = K::Int, .i = long_int(le(1))}); return;  // LONG1
      case 0x8b: {                                                      // LONG4
        const int64_t n = int32_t(uint32_t(le(4)));
        check(n >= 0, "LONG4 with a negative length");
        push({.kind = K::Int, .i = long_int(uint64_t(n))});
        return;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE 754
        need(8);
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | uint8_t(p_[pos_ + k]);
        pos_ += 8;
        double d;
        std::memcpy(&d, &bits, 8);
        push({.kind = K::Float, .f = d});
        return;
      }
      case 0x8c: push(str(bytes(le(1)))); return;  // SHORT_BINUNICODE
      case 'X': push(str(bytes(le(4)))); return;   // BINUNICODE
      case 0x8d: push(str(bytes(le(8)))); return;  // BINUNICODE8
      case 'C': push(str(bytes(le(1)), K::Bytes)); return;
      case 'B': push(str(bytes(le(4)), K::Bytes)); return;
      case 0x8e: push(str(bytes(le(8)), K::Bytes)); return;
      case 'c': {  // GLOBAL module\nname\n
        std::string module = line();
        std::string name = line();
        push(resolve(module, name));
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        const Val name = pop();
        const Val module = pop();
        check(name.kind == K::Str && module.kind == K::Str, "STACK_GLOBAL needs two str");
        push(resolve(str_of(module), str_of(name)));
        return;
      }
      case 'R': {
        const Val args = pop();
        const Val callable = pop();
        push(reduce(callable, args));
        return;
      }
      case 'b': {  // BUILD: only an OrderedDict's attributes (a state_dict's _metadata), dropped
        const Val state = pop();
        const Val target = top();
        if (target.kind != K::Dict || (state.kind != K::Dict && state.kind != K::None))
          fail("BUILD on ", a(target.kind), " with ", a(state.kind), " (only a state_dict's _metadata is read)");
        return;
      }
      case 'Q': push(persistent_load(pop())); return;  // BINPERSID
      case 'q': memo_put(le(1)); return;
      case 'r': memo_put(le(4)); return;
      case 0x94: memo_put(memo_.size()); return;  // MEMOIZE
      case 'h': memo_get(le(1)); return;
      case 'j': memo_get(le(4)); return;
      case '0': pop(); return;
      case '1': pop_mark(); return;
      case '2': push(top()); return;
      default: break;
    }
    if (const char* name = refused_opcode_name(op)) fail("opcode ", name, " is not one torch.save writes");
    fail("unknown opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15]);
  }

  // LONG1/LONG4's n bytes, little-endian two's complement; brisk reads those that fit int64.
  int64_t long_int(uint64_t n) {
    need(n);
    check(n <= 8, "an integer of ", n, " bytes (wider than 64 bits)");
    if (n == 0) return 0;
    uint64_t v = le(int(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(v);
  }

  Val resolve(const std::string& module, const std::string& name) {
    if (module == "collections" && name == "OrderedDict") return global(Global::OrderedDict);
    if (module == "torch._utils") {
      if (name == "_rebuild_tensor_v2") return global(Global::RebuildTensor);
      if (name == "_rebuild_parameter") return global(Global::RebuildParameter);
      if (name == "_rebuild_parameter_with_state") return global(Global::RebuildParameterWithState);
    }
    if (module == "torch") {
      if (name == "Size") return global(Global::TorchSize);
      for (const StorageClass& c : kStorageClasses) {
        if (name == c.name) return global(Global::StorageType, c.dtype);
      }
      if (name.size() > 7 && name.ends_with("Storage"))
        fail("storage type 'torch.", name, "' has no brisk dtype (brisk reads Float, Double, Half, BFloat16, Long, ",
             "Int, Char, Byte and Bool storages)");
    }
    const bool whole_module = module.starts_with("torch.nn.modules.");
    fail("global '", module, ".", name, "' is not allowed (only the globals torch.save writes for tensors and ",
         "containers)", whole_module ? ": this file holds a whole nn.Module; save its state_dict() instead" : "");
  }

  Val reduce(const Val& callable, const Val& args_val) {
    if (callable.kind != K::Global) fail("REDUCE calls ", a(callable.kind), ", not a known global");
    if (args_val.kind != K::Tuple) fail("REDUCE's arguments are ", a(args_val.kind), ", not a tuple");
    const std::vector<Val> args = seq_of(args_val);
    switch (Global(callable.i)) {
      case Global::OrderedDict:
        check(args.empty(), "OrderedDict called with ", args.size(), " arguments (torch.save gives none)");
        return dict();
      case Global::RebuildTensor: return rebuild_tensor(args);
      case Global::RebuildParameter:
      case Global::RebuildParameterWithState: {
        const size_t want = Global(callable.i) == Global::RebuildParameter ? 3 : 4;
        check(args.size() == want && args[0].kind == K::Tensor, "_rebuild_parameter needs (tensor, requires_grad, ",
              "hooks", want == 4 ? ", state" : "", ")");
        return args[0];
      }
      case Global::TorchSize:
        check(args.size() == 1 && args[0].kind == K::Tuple, "torch.Size needs one tuple");
        for (const Val& v : seq_of(args[0])) {
          if (v.kind != K::Int) fail("torch.Size of ", a(v.kind));
        }
        return args[0];
      case Global::StorageType: break;
    }
    fail("a storage type cannot be called (it only names a dtype in a persistent id)");
  }

  // ('storage', torch.FloatStorage, key, location, numel) -> the storage, loaded once per key.
  Val persistent_load(const Val& pid) {
    if (pid.kind != K::Tuple) fail("a persistent id that is ", a(pid.kind), ", not a tuple");
    const std::vector<Val> id = seq_of(pid);
    check(id.size() == 5 && id[0].kind == K::Str && str_of(id[0]) == "storage",
          "a persistent id other than ('storage', type, key, location, numel)");
    if (id[1].kind != K::Global || Global(id[1].i) != Global::StorageType)
      fail("a persistent id whose storage type is ", a(id[1].kind));
    check(id[2].kind == K::Str && id[3].kind == K::Str && id[4].kind == K::Int,
          "a persistent id with a key, location or numel of the wrong type");
    const std::string& key = str_of(id[2]);
    const DType dtype = id[1].dtype;
    const int64_t numel = id[4].i;
    check(numel >= 0, "storage '", key, "' with ", numel, " elements");
    auto it = storage_index_.find(key);
    if (it == storage_index_.end()) {
      Storage s = load_storage_(StorageRef{.key = key, .dtype = dtype, .numel = numel, .location = str_of(id[3])});
      storages_.push_back({std::move(s), dtype, numel});
      it = storage_index_.emplace(key, storages_.size() - 1).first;
    }
    const LoadedStorage& s = storages_[it->second];
    check(s.dtype == dtype && s.numel == numel, "storage '", key, "' is named with two dtypes or sizes");
    return {.kind = K::Storage, .i = int64_t(it->second)};
  }

  // A tuple of ints as a Shape (at most kMaxDims, each >= 0).
  Shape dims(const Val& v, const char* what) {
    if (v.kind != K::Tuple) fail("_rebuild_tensor_v2's ", what, " is ", a(v.kind), ", not a tuple");
    const std::vector<Val>& items = seq_of(v);
    check(items.size() <= size_t(kMaxDims), "a tensor of ", items.size(), " dims (brisk has at most ", kMaxDims, ")");
    Shape s;
    for (const Val& d : items) {
      if (d.kind != K::Int || d.i < 0)
        fail("_rebuild_tensor_v2's ", what, " holds ", a(d.kind), d.kind == K::Int ? " < 0" : "");
      s.push_back(d.i);
    }
    return s;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]): a
  // view on the storage, checked to stay inside it (no element is read or copied here).
  Val rebuild_tensor(const std::vector<Val>& args) {
    check(args.size() == 6 || args.size() == 7, "_rebuild_tensor_v2 with ", args.size(), " arguments (6 or 7)");
    if (args[0].kind != K::Storage) fail("_rebuild_tensor_v2 of ", a(args[0].kind), ", not a storage");
    check(args[1].kind == K::Int && args[1].i >= 0, "_rebuild_tensor_v2 with a bad storage offset");
    const LoadedStorage& s = storages_[args[0].i];
    const Shape sizes = dims(args[2], "size");
    const Shape strides = dims(args[3], "stride");
    check(sizes.size() == strides.size(), "_rebuild_tensor_v2 with ", sizes.size(), " sizes and ", strides.size(),
          " strides");
    check(args[5].kind == K::Dict && dicts_[args[5].i].empty(),
          "_rebuild_tensor_v2 with backward hooks (brisk reads none)");
    // The last element's index, offset + sum (size - 1) * stride, must lie inside the storage.
    // And the element count (zeros counted as ones, so that the dense strides of an empty
    // tensor fit int64 too) may pass the storage's only by kMaxExpand: overlapping or
    // expanded (stride 0) views are views, but a 2^62-element one would be a trap for the
    // first contiguous() or clone().
    int64_t last = args[1].i;
    int64_t count = 1;
    bool empty = false;
    bool overflow = false;
    for (int d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 0) empty = true;
      int64_t step = 0;
      overflow |= __builtin_mul_overflow(sizes[d] == 0 ? 0 : sizes[d] - 1, strides[d], &step);
      overflow |= __builtin_add_overflow(last, step, &last);
      overflow |= __builtin_mul_overflow(count, std::max<int64_t>(sizes[d], 1), &count);
    }
    if (overflow || (empty ? args[1].i > s.numel : last >= s.numel))
      fail("a tensor of size ", sizes, " stride ", strides, " offset ", args[1].i, " reaches past its storage of ",
           s.numel, " elements");
    if (count > std::max(s.numel, kMaxExpand))
      fail("a tensor of size ", sizes, " stride ", strides, " has ", count, " elements over a storage of ", s.numel,
           " (a view that repeats elements is read up to ", kMaxExpand, ")");
    return tensor(make_view(s.storage, sizes, strides, args[1].i, s.dtype));
  }
  Val tensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return {.kind = K::Tensor, .i = int64_t(tensors_.size() - 1)};
  }

  // ---- the result
  void charge(int64_t bytes) {
    budget_ -= bytes;
    check(budget_ >= 0, "the result expands past its budget (containers shared many times over)");
  }
  // Each container is charged for its slots before they are made, each string for its bytes.
  TorchValue convert(const Val& v, int depth) {
    switch (v.kind) {
      case K::None: return TorchValue();
      case K::Bool: return TorchValue::boolean(v.i != 0);
      case K::Int: return TorchValue::integer(v.i);
      case K::Float: return TorchValue::floating(v.f);
      case K::Str:
      case K::Bytes: {
        charge(int64_t(str_of(v).size()));
        return v.kind == K::Str ? TorchValue::string(str_of(v)) : TorchValue::bytes(str_of(v));
      }
      case K::Tensor: return TorchValue::tensor(tensors_[v.i]);
      case K::List:
      case K::Tuple: {
        check(depth < kPickleMaxDepth, "containers nested deeper than ", kPickleMaxDepth);
        const std::vector<Val>& src = seqs_[v.i];
        charge(int64_t(src.size() * sizeof(TorchValue)));
        TorchValue::Items items;
        items.reserve(src.size());
        for (const Val& item : src) items.push_back(convert(item, depth + 1));
        return v.kind == K::List ? TorchValue::list(std::move(items)) : TorchValue::tuple(std::move(items));
      }
      case K::Dict: {
        check(depth < kPickleMaxDepth, "containers nested deeper than ", kPickleMaxDepth);
        const Dict& src = dicts_[v.i];
        charge(int64_t(src.size() * 2 * sizeof(TorchValue)));
        TorchValue::Entries entries;
        entries.reserve(src.size());
        for (const auto& entry : src) {
          TorchValue key = convert(entry.first, depth + 1);
          entries.emplace_back(std::move(key), convert(entry.second, depth + 1));
        }
        return TorchValue::dict(std::move(entries));
      }
      case K::Global:
      case K::Storage: break;
    }
    fail("the result holds ", a(v.kind), " on its own (torch.save wraps storages in tensors)");
  }

  std::string_view p_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  const StorageLoader& load_storage_;
  const std::string& what_;
  int64_t budget_ = 0;

  std::vector<Val> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Val> memo_;
  std::vector<std::string> strings_;
  std::vector<std::vector<Val>> seqs_;
  std::vector<Dict> dicts_;
  std::unordered_map<std::string, size_t> dict_keys_;  // (dict, key kind, key) -> slot
  std::vector<Tensor> tensors_;
  std::vector<LoadedStorage> storages_;
  std::unordered_map<std::string, size_t> storage_index_;
};

}  // namespace

TorchValue unpickle_torch(std::string_view program, const StorageLoader& load_storage, const std::string& what) {
  return Machine(program, load_storage, what).run();
}

}  // namespace brisk::interop
