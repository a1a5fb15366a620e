#include "launcher/ssh/remote_command.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "rendezvous/base/usage_error.h"

namespace dtrun::launcher {
namespace {

bool is_identifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Words that mean the same to a shell unquoted (for readable --dry-run).
bool needs_no_quotes(std::string_view word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
  });
}

// A byte a terminal acts on instead of showing: C0 controls (newline,
// escape), DEL, and the first byte of a UTF-8 C1 control (\u0080-\u009f,
// 0xc2 then 0x80-0x9f; the second byte is escaped along with it).
bool is_control(std::string_view word, std::size_t i) {
  auto c = static_cast<unsigned char>(word[i]);
  if (c < 0x20 || c == 0x7f) return true;
  return c == 0xc2 && i + 1 < word.size() && static_cast<unsigned char>(word[i + 1]) >= 0x80 &&
         static_cast<unsigned char>(word[i + 1]) <= 0x9f;
}

bool has_control(std::string_view word) {
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (is_control(word, i)) return true;
  }
  return false;
}

// bash's, zsh's and ksh's $'...' (POSIX sh since 2024): the same word,
// with every control byte written as an escape, so a pasted line runs
// what dtrun runs and printing it moves no cursor and starts no line.
std::string ansi_c_quote(std::string_view word) {
  std::string out = "$'";
  for (std::size_t i = 0; i < word.size(); ++i) {
    char c = word[i];
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_control(word, i)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      if (static_cast<unsigned char>(c) == 0xc2) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(word[++i]));
      }
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

}  // namespace

std::string shell_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += needs_no_quotes(w) ? w : has_control(w) ? ansi_c_quote(w) : shell_quote(w);
  }
  return out;
}

std::vector<std::string> split_ssh_command(std::string_view text) {
  std::vector<std::string> words;
  std::optional<std::string> word;  // nullopt: between words
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      } else {
        *word += c;
      }
      continue;
    }
    if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < text.size() &&
                 std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) {
        *word += text[++i];
      } else {
        *word += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (word) words.push_back(std::move(*word));
      word.reset();
      continue;
    }
    if (!word) word.emplace();
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '\\' && i + 1 < text.size()) {
      *word += text[++i];
    } else {
      *word += c;
    }
  }
  if (quote != 0) {
    throw usage_error(fmt::format("--ssh: unterminated {} quote in '{}'", quote, text));
  }
  if (word) words.push_back(std::move(*word));
  if (words.empty()) {
    throw usage_error("--ssh: empty; give the ssh command and its options, e.g. --ssh 'ssh -p 2222'");
  }
  return words;
}

std::vector<std::string> parse_export_list(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = std::min(text.find(',', start), text.size());
    std::string item(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;  // "A,,B" and a trailing comma: nothing to export
    std::string name = item.substr(0, item.find('='));
    if (!is_identifier(name)) {
      throw usage_error(fmt::format(
          "--export: '{}' is not a variable name (letters, digits, '_'; VAR or VAR=value)",
          name));
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<std::pair<std::string, std::string>> select_exports(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& exports) {
  std::map<std::string, std::string> chosen;
  for (const auto& [name, value] : env) {
    if (!is_identifier(name)) continue;  // env(1) and shells cannot set it anyway
    for (const auto& prefix : default_export_prefixes) {
      if (name.rfind(prefix, 0) == 0) {
        chosen[name] = value;
        break;
      }
    }
  }
  for (const auto& item : exports) {
    auto eq = item.find('=');
    if (eq != std::string::npos) {
      chosen[item.substr(0, eq)] = item.substr(eq + 1);
    } else if (auto it = env.find(item); it != env.end()) {
      chosen[item] = it->second;
    }
  }
  return {chosen.begin(), chosen.end()};
}

// Quoted only when a POSIX shell would read it otherwise, so the command
// (shown again, quoted as a whole, by --dry-run) stays readable. Never
// $'...': the remote login shell may be dash.
namespace {
std::string remote_word(const std::string& word) {
  return needs_no_quotes(word) ? word : shell_quote(word);
}
}  // namespace

std::string remote_shell_command(const std::string& workdir,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 const std::vector<std::string>& argv) {
  std::string out = fmt::format("cd -- {} && exec", remote_word(workdir));
  if (!env.empty()) {
    out += " env --";
    for (const auto& [name, value] : env) out += ' ' + remote_word(name + "=" + value);
  }
  for (const auto& word : argv) out += ' ' + remote_word(word);
  return out;
}

std::vector<std::string> ssh_argv(const std::vector<std::string>& ssh_words,
                                  const std::string& target, const std::string& remote_command) {
  std::vector<std::string> argv = ssh_words;
  // ssh keeps the first value of an option, so the user's own -o settings
  // (earlier on the line) win over these.
  argv.insert(argv.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "--", target,
                           remote_command});
  return argv;
}

}  // namespace dtrun::launcher
