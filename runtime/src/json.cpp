#include "json.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "utf8.h"

namespace edgenlp::json {

const Value* Value::get(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  bool parse_document(Value* out, std::string* error) {
    skip_ws();
    if (!parse_value(out, 0)) return fail(error);
    skip_ws();
    if (pos_ != s_.size()) {
      msg_ = "trailing characters after the JSON value";
      return fail(error);
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 64;

  bool fail(std::string* error) {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    *error = "line " + std::to_string(line) + " column " + std::to_string(col) + ": " + msg_;
    return false;
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool expect_literal(const char* lit) {
    const std::size_t n = std::strlen(lit);
    if (s_.substr(pos_, n) != lit) {
      msg_ = std::string("expected '") + lit + "'";
      return false;
    }
    pos_ += n;
    return true;
  }

  bool parse_value(Value* v, int depth) {
    if (depth > kMaxDepth) {
      msg_ = "nesting deeper than 64 levels";
      return false;
    }
    if (pos_ >= s_.size()) {
      msg_ = "unexpected end of input";
      return false;
    }
    const char c = s_[pos_];
    switch (c) {
      case 'n':
        v->type_ = Value::Type::kNull;
        return expect_literal("null");
      case 't':
        v->type_ = Value::Type::kBool;
        v->bool_ = true;
        return expect_literal("true");
      case 'f':
        v->type_ = Value::Type::kBool;
        v->bool_ = false;
        return expect_literal("false");
      case '"':
        v->type_ = Value::Type::kString;
        return parse_string(&v->string_);
      case '[':
        return parse_array(v, depth);
      case '{':
        return parse_object(v, depth);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(v);
        msg_ = std::string("unexpected character '") + c + "'";
        return false;
    }
  }

  bool parse_number(Value* v) {
    const std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&]() {
      const std::size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      msg_ = "invalid number";
      return false;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) {
        msg_ = "invalid number";
        return false;
      }
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) {
        msg_ = "invalid number";
        return false;
      }
    }
    const std::string text(s_.substr(start, pos_ - start));
    v->type_ = Value::Type::kNumber;
    v->number_ = std::strtod(text.c_str(), nullptr);
    return true;
  }

  bool parse_hex4(char32_t* out) {
    if (s_.size() - pos_ < 4) {
      msg_ = "truncated \\u escape";
      return false;
    }
    char32_t r = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      r <<= 4;
      if (c >= '0' && c <= '9') {
        r |= static_cast<char32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        r |= static_cast<char32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        r |= static_cast<char32_t>(c - 'A' + 10);
      } else {
        msg_ = "invalid \\u escape";
        return false;
      }
    }
    *out = r;
    return true;
  }

  bool parse_string(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (pos_ >= s_.size()) {
        msg_ = "unterminated string";
        return false;
      }
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        break;
      }
      if (c < 0x20) {
        msg_ = "control character in string";
        return false;
      }
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) {
        msg_ = "unterminated escape";
        return false;
      }
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          char32_t cp;
          if (!parse_hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            char32_t lo;
            if (s_.substr(pos_, 2) != "\\u") {
              msg_ = "unpaired surrogate in \\u escape";
              return false;
            }
            pos_ += 2;
            if (!parse_hex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) {
              msg_ = "unpaired surrogate in \\u escape";
              return false;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            msg_ = "unpaired surrogate in \\u escape";
            return false;
          }
          utf8::append(cp, out);
          break;
        }
        default:
          msg_ = std::string("invalid escape '\\") + e + "'";
          return false;
      }
    }
    return true;
  }

  bool parse_array(Value* v, int depth) {
    ++pos_;
    v->type_ = Value::Type::kArray;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      skip_ws();
      v->array_.emplace_back();
      if (!parse_value(&v->array_.back(), depth + 1)) return false;
      skip_ws();
      if (pos_ >= s_.size()) {
        msg_ = "unterminated array";
        return false;
      }
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      msg_ = "expected ',' or ']'";
      return false;
    }
  }

  bool parse_object(Value* v, int depth) {
    ++pos_;
    v->type_ = Value::Type::kObject;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') {
        msg_ = "expected a string key";
        return false;
      }
      std::string key;
      if (!parse_string(&key)) return false;
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') {
        msg_ = "expected ':'";
        return false;
      }
      ++pos_;
      skip_ws();
      Value member;
      if (!parse_value(&member, depth + 1)) return false;
      v->object_.insert_or_assign(std::move(key), std::move(member));
      skip_ws();
      if (pos_ >= s_.size()) {
        msg_ = "unterminated object";
        return false;
      }
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      msg_ = "expected ',' or '}'";
      return false;
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string msg_;
};

bool parse(std::string_view text, Value* out, std::string* error) {
  *out = Value();
  Parser p(text);
  return p.parse_document(out, error);
}

}  // namespace edgenlp::json
