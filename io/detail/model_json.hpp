// Reading a model file's bytes into a JSON document, for the forest importer
// (io/forest_import.cpp): gzip, XGBoost's non-finite literals, UBJSON's detection and its size
// budget, and At, a JSON value with its path for error messages. Internal: not installed.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/types.hpp"

namespace canopy::io_detail {

using nlohmann::json;

// The whole file, gunzipped if it is gzip-compressed (zlib reads plain files as they are).
std::string read_whole_file(const std::string& path);

// XGBoost writes non-finite floats as the bare literals NaN, Infinity and -Infinity, which
// JSON does not allow (nlohmann::json rejects them). Each one outside a string becomes a string
// of the same length, so the parser's line and column numbers stay those of the file: the
// marker byte, then "I" or "-I" for the infinities, padded with spaces. The marker is a byte
// the text holds nowhere, so no string of the file can pass for a literal. Returns the marker,
// 0 when there was nothing to replace (text untouched).
char replace_nonfinite_literals(std::string& text, const std::string& name);

// UBJSON (XGBoost's .ubj, its default since 2.1) is an object, '{', whose first key starts
// with the integer type marker of its length (or an optimised container's '$' / '#'); JSON
// text has whitespace, '"' or '}' there.
bool looks_like_ubjson(const std::string& b);

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_message(const json::exception& e);

// Counts a UBJSON document's values without building it, and stops once they outnumber its
// bytes. Every value takes at least a byte, except in an optimised container of a type with
// no payload (null, true, false): "[$Z#l" and four bytes declare any number of nulls, and
// nlohmann::json::from_ubjson builds them all (a 14-byte file ran out of 4 GB). It also stops
// past kMaxDepth nested containers: nlohmann's UBJSON reader recurses once per level.
class UbjsonBudget : public nlohmann::json_sax<json> {
 public:
  static constexpr int kMaxDepth = 256;  // an XGBoost model nests 6 levels
  explicit UbjsonBudget(std::size_t values) : left_(values) {}
  bool exceeded() const { return exceeded_; }
  bool too_deep() const { return too_deep_; }
  bool null() override { return take(); }
  bool boolean(bool) override { return take(); }
  bool number_integer(number_integer_t) override { return take(); }
  bool number_unsigned(number_unsigned_t) override { return take(); }
  bool number_float(number_float_t, const string_t&) override { return take(); }
  bool string(string_t&) override { return take(); }
  bool binary(binary_t&) override { return take(); }
  bool start_object(std::size_t) override { return enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return --depth_, true; }
  // Malformed input: from_ubjson, run next, reports it with its position.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool take() {
    if (left_ == 0) {
      exceeded_ = true;
      return false;
    }
    --left_;
    return true;
  }
  bool enter() {
    if (++depth_ > kMaxDepth) {
      too_deep_ = true;
      return false;
    }
    return take();
  }
  std::size_t left_;
  int depth_ = 0;
  bool exceeded_ = false, too_deep_ = false;
};

// A JSON value and the path that leads to it, for messages like
// "m.json: learner/gradient_booster/model/trees/3/split_indices/7: ...".
class At {
 public:
  // marker: the byte that tags the NaN / Infinity / -Infinity literals replace_nonfinite_literals()
  // replaced (0: none were).
  At(const json& j, std::string path, const std::string* file, char marker = 0)
      : j_(&j), path_(std::move(path)), file_(file), marker_(marker) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(*file_ + ": " + (path_.empty() ? std::string("(top level)") : path_) + ": " + msg);
  }
  const std::string& path() const { return path_; }

  void expect(json::value_t t, const char* what) const {
    if (j_->type() != t || nonfinite(nullptr)) fail(std::string("expected ") + what + ", found " + describe_value());
  }
  std::string describe_value() const {
    double v = 0;
    if (nonfinite(&v)) return "number " + std::string(std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    std::string d = j_->type_name();
    if (j_->is_primitive()) {
      std::string v = j_->dump();
      if (v.size() > 40) v = v.substr(0, 37) + "...";
      d += " " + v;
    }
    return d;
  }
  bool has(const char* key) const {
    expect(json::value_t::object, "an object");
    return j_->contains(key);
  }
  At operator[](const char* key) const {
    expect(json::value_t::object, "an object");
    const auto it = j_->find(key);
    if (it == j_->end()) fail(std::string("the field '") + key + "' is missing");
    return At(*it, child_path(key), file_, marker_);
  }
  std::size_t size() const {
    expect(json::value_t::array, "an array");
    return j_->size();
  }
  At operator[](std::size_t i) const {
    if (i >= size()) fail("has " + std::to_string(size()) + " entries, entry " + std::to_string(i) + " is missing");
    return At((*j_)[i], child_path(std::to_string(i)), file_, marker_);
  }

  std::string str() const {
    expect(json::value_t::string, "a string");
    return j_->get<std::string>();
  }
  std::int64_t integer() const {
    if (!j_->is_number_integer()) fail("expected an integer, found " + describe_value());
    if (j_->is_number_unsigned() && j_->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail("the integer " + j_->dump() + " is too large");
    return j_->get<std::int64_t>();
  }
  double number() const {
    double v = 0;
    if (nonfinite(&v)) return v;
    if (!j_->is_number()) fail("expected a number, found " + describe_value());
    return j_->get<double>();
  }
  // 0/1 or false/true.
  bool flag() const {
    if (j_->is_boolean()) return j_->get<bool>();
    if (j_->is_number_integer()) {
      const std::int64_t v = j_->get<std::int64_t>();
      if (v == 0 || v == 1) return v == 1;
    }
    fail("expected 0, 1, false or true, found " + describe_value());
  }
  // XGBoost stores its parameters as strings: "7", "5E-1", and since 2.1 "[5E-1]".
  std::int64_t int_param() const {
    if (j_->is_number_integer()) return integer();
    const std::string s = str();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno) fail("'" + s + "' is not an integer");
    return v;
  }
  double float_param() const {
    if (j_->is_number() || nonfinite(nullptr)) return number();
    if (j_->is_array()) {
      if (size() != 1) fail("expected one value, found " + std::to_string(size()) + " (several base scores are not supported)");
      // One level only: [[[...]]] recursed once per bracket and overflowed the stack.
      const At v = (*this)[std::size_t{0}];
      if (v.j_->is_array()) v.fail("expected a number or a string, found an array");
      return v.float_param();
    }
    std::string s = str();
    if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
      s = s.substr(1, s.size() - 2);
      if (s.find(',') != std::string::npos) fail("several base scores ('" + str() + "') are not supported");
    }
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || errno == ERANGE) fail("'" + str() + "' is not a number");
    return v;
  }

 private:
  // One of the strings replace_nonfinite_literals() put in place of a literal: *v its value.
  bool nonfinite(double* v) const {
    if (marker_ == 0 || !j_->is_string()) return false;
    const std::string& s = j_->get_ref<const std::string&>();
    if (s.empty() || s[0] != marker_) return false;
    const double inf = std::numeric_limits<double>::infinity();
    const double x = s == std::string(1, marker_) ? std::numeric_limits<double>::quiet_NaN() : s[1] == 'I' ? inf : -inf;
    if (v) *v = x;
    return true;
  }
  std::string child_path(const std::string& key) const { return path_.empty() ? key : path_ + "/" + key; }
  const json* j_;
  std::string path_;
  const std::string* file_;
  char marker_;
};

}  // namespace canopy::io_detail
