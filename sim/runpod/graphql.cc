// The GraphQL reader (see graphql.h for the subset and why it is hand-written). Lexing follows the
// GraphQL spec §2 (ignored tokens: whitespace, commas, comments, BOM; names; int and float values;
// strings with escapes and block strings); parsing follows §2.3–§2.9 for one operation.
#include "sim/runpod/graphql.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include <boost/json.hpp>

namespace hyperslice::sim::runpod::graphql {

namespace json = boost::json;

const Value* Value::Field(std::string_view name) const {
  for (const auto& [k, v] : fields) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Selection::Arg(std::string_view arg) const {
  for (const auto& [k, v] : args) {
    if (k == arg) return &v;
  }
  return nullptr;
}

Value FromJson(const json::value& v) {
  Value out;
  switch (v.kind()) {
    case json::kind::null:
      break;
    case json::kind::bool_:
      out.kind = Value::Kind::kBool;
      out.b = v.get_bool();
      break;
    case json::kind::int64:
      out.kind = Value::Kind::kInt;
      out.i = v.get_int64();
      break;
    case json::kind::uint64:
      out.kind = Value::Kind::kFloat;
      out.f = static_cast<double>(v.get_uint64());
      break;
    case json::kind::double_:
      out.kind = Value::Kind::kFloat;
      out.f = v.get_double();
      break;
    case json::kind::string:
      out.kind = Value::Kind::kString;
      out.s = std::string(v.get_string());
      break;
    case json::kind::array:
      out.kind = Value::Kind::kList;
      for (const auto& e : v.get_array()) out.list.push_back(FromJson(e));
      break;
    case json::kind::object:
      out.kind = Value::Kind::kObject;
      for (const auto& kv : v.get_object()) {
        out.fields.push_back(NamedValue{std::string(kv.key()), FromJson(kv.value())});
      }
      break;
  }
  return out;
}

namespace {

enum class Tok { kEof, kPunct, kName, kInt, kFloat, kString };

struct Token {
  Tok kind = Tok::kEof;
  std::string text;  // punctuator, name, number text or decoded string
  Location loc;
};

class Parser {
 public:
  Parser(std::string_view src, const json::object& vars) : src_(src), vars_(vars) {}

  ParseResult Run() {
    ParseResult r;
    if (!Next()) return Fail();
    auto doc = std::make_unique<Document>();
    if (tok_.kind == Tok::kPunct && tok_.text == "{") {
      if (!SelectionSet(doc->selections)) return Fail();
    } else if (tok_.kind == Tok::kName && (tok_.text == "query" || tok_.text == "mutation")) {
      doc->operation =
          tok_.text == "query" ? Document::Operation::kQuery : Document::Operation::kMutation;
      if (!Next()) return Fail();
      if (tok_.kind == Tok::kName) {
        doc->name = tok_.text;
        if (!Next()) return Fail();
      }
      if (IsPunct("(") && !VariableDefinitions()) return Fail();
      if (IsPunct("@")) return Unsupported("directives");
      if (!SelectionSet(doc->selections)) return Fail();
    } else if (tok_.kind == Tok::kName && tok_.text == "subscription") {
      return Unsupported("subscriptions");
    } else if (tok_.kind == Tok::kName && tok_.text == "fragment") {
      return Unsupported("fragments");
    } else {
      Unexpected();
      return Fail();
    }
    if (tok_.kind != Tok::kEof) {
      // A second definition (several operations or fragments) is not part of the subset.
      if (tok_.kind == Tok::kName && tok_.text == "fragment") return Unsupported("fragments");
      Unexpected();
      return Fail();
    }
    r.document = std::move(doc);
    return r;
  }

 private:
  ParseResult Fail() {
    ParseResult r;
    r.error = error_;
    return r;
  }
  ParseResult Unsupported(const std::string& what) {
    error_ = {"Syntax Error: " + what + " are not supported by the RunPod simulator.", tok_.loc};
    return Fail();
  }
  bool IsPunct(std::string_view p) const { return tok_.kind == Tok::kPunct && tok_.text == p; }

  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case Tok::kEof:
        return "<EOF>";
      case Tok::kPunct:
        return "\"" + t.text + "\"";
      case Tok::kName:
        return "Name \"" + t.text + "\"";
      case Tok::kInt:
        return "Int \"" + t.text + "\"";
      case Tok::kFloat:
        return "Float \"" + t.text + "\"";
      case Tok::kString:
        return "String";
    }
    return "token";
  }
  void Unexpected() {
    if (error_.message.empty()) {
      error_ = {"Syntax Error: Unexpected " + Describe(tok_) + ".", tok_.loc};
    }
  }
  bool Expect(std::string_view p) {
    if (!IsPunct(p)) {
      error_ = {"Syntax Error: Expected \"" + std::string(p) + "\", found " + Describe(tok_) + ".",
                tok_.loc};
      return false;
    }
    return Next();
  }
  bool ExpectName(std::string* out) {
    if (tok_.kind != Tok::kName) {
      error_ = {"Syntax Error: Expected Name, found " + Describe(tok_) + ".", tok_.loc};
      return false;
    }
    *out = tok_.text;
    return Next();
  }

  // ---- lexer ----
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void Advance(size_t n = 1) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k) {
      if (src_[pos_] == '\n') {
        line_++;
        line_start_ = pos_ + 1;
      }
      pos_++;
    }
  }
  Location Here() const { return {line_, static_cast<int>(pos_ - line_start_) + 1}; }
  bool LexError(std::string m) {
    error_ = {"Syntax Error: " + std::move(m), Here()};
    return false;
  }

  bool Next() {
    // Ignored tokens: whitespace, line terminators, commas, comments, the byte order mark.
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
        Advance();
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') Advance();
      } else if (src_.substr(pos_, 3) == "\xEF\xBB\xBF") {
        Advance(3);
      } else {
        break;
      }
    }
    tok_ = Token{};
    tok_.loc = Here();
    if (pos_ >= src_.size()) return true;
    char c = src_[pos_];
    if (src_.substr(pos_, 3) == "...") {
      Unsupported("fragments");
      return false;
    }
    if (std::string_view("!$&():=@[]{}|").find(c) != std::string_view::npos) {
      tok_.kind = Tok::kPunct;
      tok_.text = std::string(1, c);
      Advance();
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        Advance();
      }
      tok_.kind = Tok::kName;
      tok_.text = std::string(src_.substr(start, pos_ - start));
      return true;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return Number();
    if (c == '"') return src_.substr(pos_, 3) == "\"\"\"" ? BlockString() : String();
    return LexError("Unexpected character \"" + std::string(1, c) + "\".");
  }

  bool Number() {
    size_t start = pos_;
    bool is_float = false;
    if (Peek() == '-') Advance();
    if (Peek() == '0') {
      Advance();
      if (std::isdigit(static_cast<unsigned char>(Peek()))) {
        return LexError("Invalid number, unexpected digit after 0.");
      }
    } else if (std::isdigit(static_cast<unsigned char>(Peek()))) {
      while (std::isdigit(static_cast<unsigned char>(Peek()))) Advance();
    } else {
      return LexError("Invalid number, expected digit.");
    }
    if (Peek() == '.') {
      is_float = true;
      Advance();
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
        return LexError("Invalid number, expected digit after \".\".");
      }
      while (std::isdigit(static_cast<unsigned char>(Peek()))) Advance();
    }
    if (Peek() == 'e' || Peek() == 'E') {
      is_float = true;
      Advance();
      if (Peek() == '+' || Peek() == '-') Advance();
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
        return LexError("Invalid number, expected digit in exponent.");
      }
      while (std::isdigit(static_cast<unsigned char>(Peek()))) Advance();
    }
    char after = Peek();
    if (after == '.' || after == '_' || std::isalpha(static_cast<unsigned char>(after))) {
      return LexError("Invalid number, expected digit but got \"" + std::string(1, after) + "\".");
    }
    tok_.kind = is_float ? Tok::kFloat : Tok::kInt;
    tok_.text = std::string(src_.substr(start, pos_ - start));
    return true;
  }

  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool Hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = Peek();
      int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
              : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
              : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                          : -1;
      if (d < 0) return LexError("Invalid Unicode escape sequence.");
      v = v * 16 + static_cast<uint32_t>(d);
      Advance();
    }
    *out = v;
    return true;
  }

  bool String() {
    Advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= src_.size() || Peek() == '\n' || Peek() == '\r') {
        return LexError("Unterminated string.");
      }
      char c = Peek();
      if (c == '"') {
        Advance();
        break;
      }
      if (c == '\\') {
        Advance();
        char e = Peek();
        Advance();
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out += e;
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            uint32_t cp = 0;
            if (!Hex4(&cp)) return false;
            // A surrogate pair written as two escapes is one code point.
            if (cp >= 0xD800 && cp <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
              Advance(2);
              uint32_t lo = 0;
              if (!Hex4(&lo)) return false;
              if (lo < 0xDC00 || lo > 0xDFFF) return LexError("Invalid Unicode escape sequence.");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
              return LexError("Invalid Unicode escape sequence.");
            }
            AppendUtf8(out, cp);
            break;
          }
          default:
            return LexError("Invalid character escape sequence.");
        }
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
        return LexError("Invalid character within String.");
      }
      out += c;
      Advance();
    }
    tok_.kind = Tok::kString;
    tok_.text = std::move(out);
    return true;
  }

  // Block strings (§2.9.4): raw text, \""" is the only escape, common indentation removed.
  bool BlockString() {
    Advance(3);
    std::string raw;
    while (true) {
      if (pos_ >= src_.size()) return LexError("Unterminated string.");
      if (src_.substr(pos_, 3) == "\"\"\"") {
        Advance(3);
        break;
      }
      if (src_.substr(pos_, 4) == "\\\"\"\"") {
        raw += "\"\"\"";
        Advance(4);
        continue;
      }
      raw += Peek();
      Advance();
    }
    std::vector<std::string> lines;
    size_t s = 0;
    for (size_t k = 0; k <= raw.size(); ++k) {
      if (k == raw.size() || raw[k] == '\n' || raw[k] == '\r') {
        lines.push_back(raw.substr(s, k - s));
        if (k < raw.size() && raw[k] == '\r' && k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
        s = k + 1;
      }
    }
    size_t common = std::string::npos;
    for (size_t k = 1; k < lines.size(); ++k) {
      size_t indent = lines[k].find_first_not_of(" \t");
      if (indent == std::string::npos) continue;
      common = std::min(common, indent);
    }
    if (common != std::string::npos) {
      for (size_t k = 1; k < lines.size(); ++k) {
        lines[k] = lines[k].size() >= common ? lines[k].substr(common) : "";
      }
    }
    auto blank = [](const std::string& l) {
      return l.find_first_not_of(" \t") == std::string::npos;
    };
    while (!lines.empty() && blank(lines.front())) lines.erase(lines.begin());
    while (!lines.empty() && blank(lines.back())) lines.pop_back();
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) out += '\n';
      out += lines[k];
    }
    tok_.kind = Tok::kString;
    tok_.text = std::move(out);
    return true;
  }

  // ---- parser ----
  bool VariableDefinitions() {
    if (!Expect("(")) return false;
    while (!IsPunct(")")) {
      if (!Expect("$")) return false;
      std::string name;
      if (!ExpectName(&name)) return false;
      if (!Expect(":")) return false;
      if (!Type()) return false;
      if (IsPunct("=")) {
        if (!Next()) return false;
        Value def;
        if (!ParseValue(&def, /*is_const=*/true)) return false;
        defaults_[name] = std::move(def);
      }
      if (tok_.kind == Tok::kEof) {
        Unexpected();
        return false;
      }
    }
    return Next();
  }

  bool Type() {
    if (IsPunct("[")) {
      if (!Next() || !Type() || !Expect("]")) return false;
    } else {
      std::string n;
      if (!ExpectName(&n)) return false;
    }
    if (IsPunct("!")) return Next();
    return true;
  }

  bool SelectionSet(std::vector<Selection>& out) {
    if (!Expect("{")) return false;
    if (IsPunct("}")) {
      error_ = {"Syntax Error: Expected Name, found \"}\".", tok_.loc};
      return false;
    }
    while (!IsPunct("}")) {
      if (++depth_ > 64) return LexError("Selection sets nested too deeply.");
      Selection s;
      s.location = tok_.loc;
      std::string first;
      if (!ExpectName(&first)) return false;
      if (IsPunct(":")) {
        if (!Next()) return false;
        s.alias = first;
        if (!ExpectName(&s.name)) return false;
      } else {
        s.name = first;
      }
      if (IsPunct("(") && !Arguments(s.args)) return false;
      if (IsPunct("@")) {
        Unsupported("directives");
        return false;
      }
      if (IsPunct("{")) {
        s.has_selection_set = true;
        if (!SelectionSet(s.selections)) return false;
      }
      --depth_;
      out.push_back(std::move(s));
    }
    return Next();
  }

  bool Arguments(std::vector<std::pair<std::string, Value>>& out) {
    if (!Expect("(")) return false;
    if (IsPunct(")")) {
      error_ = {"Syntax Error: Expected Name, found \")\".", tok_.loc};
      return false;
    }
    while (!IsPunct(")")) {
      std::string name;
      if (!ExpectName(&name) || !Expect(":")) return false;
      Value v;
      if (!ParseValue(&v, false)) return false;
      out.emplace_back(std::move(name), std::move(v));
    }
    return Next();
  }

  bool ParseValue(Value* v, bool is_const) {
    if (++value_depth_ > 64) return LexError("Values nested too deeply.");
    bool ok = ParseValueInner(v, is_const);
    --value_depth_;
    return ok;
  }

  bool ParseValueInner(Value* v, bool is_const) {
    switch (tok_.kind) {
      case Tok::kEof:
        Unexpected();
        return false;
      case Tok::kInt: {
        int64_t n = 0;
        auto [p, ec] = std::from_chars(tok_.text.data(), tok_.text.data() + tok_.text.size(), n);
        if (ec != std::errc() || p != tok_.text.data() + tok_.text.size()) {
          // Out of 64-bit range: keep it as a float so validation reports it as a bad Int.
          v->kind = Value::Kind::kFloat;
          v->f = std::strtod(tok_.text.c_str(), nullptr);
        } else {
          v->kind = Value::Kind::kInt;
          v->i = n;
        }
        return Next();
      }
      case Tok::kFloat:
        v->kind = Value::Kind::kFloat;
        v->f = std::strtod(tok_.text.c_str(), nullptr);
        return Next();
      case Tok::kString:
        v->kind = Value::Kind::kString;
        v->s = tok_.text;
        return Next();
      case Tok::kName:
        if (tok_.text == "true" || tok_.text == "false") {
          v->kind = Value::Kind::kBool;
          v->b = tok_.text == "true";
        } else if (tok_.text == "null") {
          v->kind = Value::Kind::kNull;
        } else {
          v->kind = Value::Kind::kEnum;
          v->s = tok_.text;
        }
        return Next();
      case Tok::kPunct:
        break;
    }
    if (IsPunct("$") && !is_const) {
      if (!Next()) return false;
      std::string name;
      if (!ExpectName(&name)) return false;
      auto it = vars_.find(name);
      if (it != vars_.end()) {
        *v = FromJson(it->value());
      } else if (auto d = defaults_.find(name); d != defaults_.end()) {
        *v = d->second;
      } else {
        v->kind = Value::Kind::kNull;
      }
      return true;
    }
    if (IsPunct("[")) {
      v->kind = Value::Kind::kList;
      if (!Next()) return false;
      while (!IsPunct("]")) {
        Value e;
        if (!ParseValue(&e, is_const)) return false;
        v->list.push_back(std::move(e));
      }
      return Next();
    }
    if (IsPunct("{")) {
      v->kind = Value::Kind::kObject;
      if (!Next()) return false;
      while (!IsPunct("}")) {
        std::string name;
        if (!ExpectName(&name) || !Expect(":")) return false;
        Value e;
        if (!ParseValue(&e, is_const)) return false;
        v->fields.push_back(NamedValue{std::move(name), std::move(e)});
      }
      return Next();
    }
    Unexpected();
    return false;
  }

  std::string_view src_;
  const json::object& vars_;
  std::map<std::string, Value> defaults_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  int depth_ = 0;
  int value_depth_ = 0;
  Token tok_;
  ParseError error_;
};

}  // namespace

ParseResult Parse(std::string_view source, const json::object& variables) {
  if (source.size() > (1u << 20)) {
    ParseResult r;
    r.error = {"Syntax Error: Document too large.", {1, 1}};
    return r;
  }
  return Parser(source, variables).Run();
}

}  // namespace hyperslice::sim::runpod::graphql
