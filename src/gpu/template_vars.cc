// The machine config template's variables and its parser (a hand-written scanner: templates are
// untrusted input of up to 256 KiB, the CRD's maxLength).
#include "src/gpu/template_vars.h"

#include <algorithm>
#include <string>

namespace hyperslice::gpu {
namespace {

constexpr std::string_view kOpen = "{{";
constexpr std::string_view kClose = "}}";

// Go's text/template trim markers need one of these beside the dash (lex.go isSpace).
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool IdentStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool IdentChar(char c) { return IdentStart(c) || (c >= '0' && c <= '9'); }

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view TrimLeftSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view TrimRightSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsIdent(std::string_view s) {
  if (s.empty() || !IdentStart(s.front())) return false;
  return std::all_of(s.begin(), s.end(), IdentChar);
}

// At most 40 characters of an action for a message, on one line.
std::string Excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (s.size() > 40) out += "...";
  return out;
}

Error Problem(int line, const std::string& what) {
  return Error::Make(Error::Code::kInvalidArgument, "line " + std::to_string(line) + ": " + what);
}

int LinesIn(std::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

bool IsTemplateVar(std::string_view name) {
  return std::find(kTemplateVars.begin(), kTemplateVars.end(), name) != kTemplateVars.end();
}

std::string TemplateVarList() {
  std::string out;
  for (std::string_view v : kTemplateVars) {
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

Result<std::vector<TemplatePart>> ParseTemplate(std::string_view tmpl) {
  std::vector<TemplatePart> parts;
  bool trim_next = false;  // the previous action ended with " -}}"
  int line = 1;
  size_t pos = 0;
  for (;;) {
    size_t open = tmpl.find(kOpen, pos);
    std::string_view text = tmpl.substr(pos, open == std::string_view::npos ? open : open - pos);
    int text_line = line;
    line += LinesIn(text);
    // Go's left trim marker: "{{- " (dash, then a space).
    bool trim_left = open != std::string_view::npos && open + 3 < tmpl.size() &&
                     tmpl[open + 2] == '-' && IsSpace(tmpl[open + 3]);
    if (trim_next) {
      std::string_view trimmed = TrimLeftSpace(text);
      text_line += LinesIn(text.substr(0, text.size() - trimmed.size()));
      text = trimmed;
    }
    if (trim_left) text = TrimRightSpace(text);
    if (!text.empty()) parts.push_back({TemplatePart::Kind::kText, text, text_line});
    if (open == std::string_view::npos) return parts;

    size_t body_start = open + kOpen.size() + (trim_left ? 2 : 0);
    size_t close = tmpl.find(kClose, body_start);
    std::string_view rest = tmpl.substr(open);
    // An action never spans another "{{": the first one was left open.
    size_t next_open = tmpl.find(kOpen, body_start);
    bool is_comment = TrimLeftSpace(tmpl.substr(body_start)).substr(0, 2) == "/*";
    if (is_comment) {
      size_t end = tmpl.find("*/", body_start);
      if (end == std::string_view::npos) {
        return Problem(
            line, "the comment \"" + Excerpt(rest) + "\" is never closed; end it with \"*/}}\"");
      }
      close = tmpl.find(kClose, end + 2);
      next_open = std::string_view::npos;
    }
    if (close == std::string_view::npos ||
        (next_open != std::string_view::npos && next_open < close)) {
      // Shown up to the end of its line or the next "{{", where it should have been closed.
      std::string_view open_part = rest.substr(0, rest.find('\n'));
      if (next_open != std::string_view::npos) {
        open_part = open_part.substr(0, next_open - open);
      }
      return Problem(line, "\"" + Excerpt(TrimRightSpace(open_part)) +
                               "\" is never closed: every \"{{\" needs a \"}}\" (write "
                               "{{.Variable}})");
    }
    std::string_view body = tmpl.substr(body_start, close - body_start);
    // Go's right trim marker: " -}}" (a space, then the dash).
    trim_next = body.size() >= 2 && body.back() == '-' && IsSpace(body[body.size() - 2]);
    if (trim_next) body.remove_suffix(1);
    std::string_view action = TrimSpace(body);
    int action_line = line;
    line += LinesIn(tmpl.substr(open, close + kClose.size() - open));
    pos = close + kClose.size();

    if (is_comment) {
      if (action.size() < 4 || action.substr(action.size() - 2) != "*/") {
        return Problem(action_line, "\"" + Excerpt(rest) +
                                        "\": a comment must end right at \"*/}}\" (or \"*/ -}}\")");
      }
      continue;
    }
    if (action.empty()) {
      return Problem(action_line, "\"{{}}\" is empty; write {{.Variable}}");
    }
    if (action.front() == '.' && IsIdent(action.substr(1))) {
      parts.push_back({TemplatePart::Kind::kVariable, action.substr(1), action_line});
      continue;
    }
    std::string hint;
    if (IsIdent(action)) {
      hint = " (write {{." + std::string(action) + "}}: variables start with a dot)";
    }
    return Problem(action_line, "\"{{" + Excerpt(body) + "}}\" is not a variable reference; only " +
                                    "{{.Variable}} and {{/* comments */}} are supported" + hint);
  }
}

}  // namespace hyperslice::gpu
