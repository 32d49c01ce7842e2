// interop/torch_value.cpp: TorchValue's checked accessors.
#include "interop/torch_value.h"

namespace brisk::interop {

namespace {

const char* name_of(TorchValue::Kind kind) {
  using K = TorchValue::Kind;
  switch (kind) {
    case K::None: return "None";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::String: return "str";
    case K::Bytes: return "bytes";
    case K::Tensor: return "Tensor";
    case K::List: return "list";
    case K::Tuple: return "tuple";
    case K::Dict: return "dict";
  }
  return "?";
}

// "an int", "a list", "None": for messages.
std::string a(TorchValue::Kind kind) {
  const std::string name = name_of(kind);
  if (kind == TorchValue::Kind::None) return name;
  return (name[0] == 'i' ? "an " : "a ") + name;
}

}  // namespace

const char* TorchValue::kind_name() const { return name_of(kind_); }

void TorchValue::expect(Kind want) const {
  BRISK_CHECK(kind_ == want, "TorchValue: expected ", a(want), ", got ", a(kind_));
}

bool TorchValue::as_bool() const {
  expect(Kind::Bool);
  return std::get<bool>(payload_);
}

int64_t TorchValue::as_int() const {
  expect(Kind::Int);
  return std::get<int64_t>(payload_);
}

double TorchValue::as_double() const {
  if (kind_ == Kind::Int) return double(std::get<int64_t>(payload_));
  expect(Kind::Float);
  return std::get<double>(payload_);
}

const std::string& TorchValue::as_string() const {
  if (kind_ != Kind::Bytes) expect(Kind::String);
  return std::get<std::string>(payload_);
}

const Tensor& TorchValue::as_tensor() const {
  expect(Kind::Tensor);
  return std::get<Tensor>(payload_);
}

const TorchValue::Items& TorchValue::items() const {
  BRISK_CHECK(is_sequence(), "TorchValue: expected a list or tuple, got ", a(kind_));
  return std::get<Items>(payload_);
}

const TorchValue::Entries& TorchValue::entries() const {
  expect(Kind::Dict);
  return std::get<Entries>(payload_);
}

size_t TorchValue::size() const {
  if (is_sequence()) return items().size();
  if (is_dict()) return entries().size();
  return 0;
}

const TorchValue* TorchValue::find(std::string_view key) const {
  for (const auto& entry : entries()) {
    if (entry.first.kind_ == Kind::String && std::get<std::string>(entry.first.payload_) == key) return &entry.second;
  }
  return nullptr;
}

const TorchValue* TorchValue::find(int64_t key) const {
  for (const auto& entry : entries()) {
    if (entry.first.kind_ == Kind::Int && std::get<int64_t>(entry.first.payload_) == key) return &entry.second;
  }
  return nullptr;
}

const TorchValue& TorchValue::at(std::string_view key) const {
  const TorchValue* v = find(key);
  BRISK_CHECK(v, "TorchValue: no key '", key, "' in the dict");
  return *v;
}

const TorchValue& TorchValue::at(int64_t key) const {
  const TorchValue* v = find(key);
  BRISK_CHECK(v, "TorchValue: no key ", key, " in the dict");
  return *v;
}

const TorchValue& TorchValue::operator[](size_t i) const {
  const Items& v = items();
  BRISK_CHECK(i < v.size(), "TorchValue: index ", i, " out of range for ", a(kind_), " of ", v.size());
  return v[i];
}

}  // namespace brisk::interop
