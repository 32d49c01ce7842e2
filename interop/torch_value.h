// interop/torch_value.h: TorchValue, what a torch.save pickle holds once read: None, bool,
// int, float, str, bytes, Tensor, list, tuple and dict (ordered, keys str or int), as a plain
// tree of values with checked accessors. Not here: reading files (interop/torch_file.h) or
// pickles (interop/pickle.h); no Python object other than these has a TorchValue.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/tensor.h"

namespace brisk::interop {

class TorchValue {
 public:
  // In Python's words: kind_name() gives "None", "bool", "int", "float", "str", "bytes",
  // "Tensor", "list", "tuple", "dict".
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, Tensor, List, Tuple, Dict };
  using Items = std::vector<TorchValue>;
  using Entries = std::vector<std::pair<TorchValue, TorchValue>>;  // in insertion order

  TorchValue() = default;  // None
  static TorchValue boolean(bool v) { return TorchValue(Kind::Bool, v); }
  static TorchValue integer(int64_t v) { return TorchValue(Kind::Int, v); }
  static TorchValue floating(double v) { return TorchValue(Kind::Float, v); }
  static TorchValue string(std::string v) { return TorchValue(Kind::String, std::move(v)); }
  static TorchValue bytes(std::string v) { return TorchValue(Kind::Bytes, std::move(v)); }
  static TorchValue tensor(Tensor v) { return TorchValue(Kind::Tensor, std::move(v)); }
  static TorchValue list(Items v) { return TorchValue(Kind::List, std::move(v)); }
  static TorchValue tuple(Items v) { return TorchValue(Kind::Tuple, std::move(v)); }
  static TorchValue dict(Entries v) { return TorchValue(Kind::Dict, std::move(v)); }

  Kind kind() const { return kind_; }
  const char* kind_name() const;
  bool is_none() const { return kind_ == Kind::None; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }

  // Each throws brisk::Error naming both kinds when the value is of another kind.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;              // a float, or an int converted
  const std::string& as_string() const;  // a str (UTF-8) or bytes
  const Tensor& as_tensor() const;
  const Items& items() const;      // a list's or a tuple's
  const Entries& entries() const;  // a dict's

  // Elements of a list or tuple, entries of a dict; 0 for every other kind.
  size_t size() const;
  // A dict's value under a str or int key: nullptr when absent (find), brisk::Error naming
  // the key (at).
  const TorchValue* find(std::string_view key) const;
  const TorchValue* find(int64_t key) const;
  const TorchValue& at(std::string_view key) const;
  const TorchValue& at(int64_t key) const;
  const TorchValue& operator[](std::string_view key) const { return at(key); }
  // A list's or a tuple's element i (0 <= i < size()).
  const TorchValue& operator[](size_t i) const;

 private:
  using Payload = std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, Items, Entries>;
  TorchValue(Kind kind, Payload payload) : kind_(kind), payload_(std::move(payload)) {}
  void expect(Kind want) const;

  Kind kind_ = Kind::None;
  Payload payload_{};
};

}  // namespace brisk::interop
