#include "io/detail/model_json.hpp"

#include <cctype>
#include <cstring>

#include <zlib.h>

namespace canopy::io_detail {

std::string read_whole_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  gzbuffer(f, 1 << 18);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const int got = gzread(f, buf, sizeof buf);
    if (got < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error(path + ": read error (" + msg + ")");
    }
    if (got == 0) break;
    text.append(buf, static_cast<std::size_t>(got));
  }
  gzclose(f);
  return text;
}

char replace_nonfinite_literals(std::string& text, const std::string& name) {
  if (text.find("NaN") == std::string::npos && text.find("Infinity") == std::string::npos) return 0;
  struct Literal {
    const char* word;
    std::size_t len;
    const char* tag;
  };
  static const Literal literals[] = {{"NaN", 3, ""}, {"Infinity", 8, "I"}, {"-Infinity", 9, "-I"}};
  const auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  char marker = 0;
  bool replaced = false, in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if ((c != 'N' && c != 'I' && c != '-') || (i > 0 && word_char(text[i - 1]))) continue;
    for (const Literal& l : literals) {
      if (text.compare(i, l.len, l.word) != 0) continue;
      if (i + l.len < text.size() && word_char(text[i + l.len])) break;  // a longer word: the parser's to reject
      if (marker == 0) {
        for (const char m : {'\x7f', '~', '`', '^', '|'})
          if (text.find(m) == std::string::npos) {
            marker = m;
            break;
          }
        if (marker == 0) throw Error(name + ": cannot read its NaN / Infinity literals (no free marker byte)");
      }
      std::string s = "\"" + std::string(1, marker) + l.tag + "\"";
      s.resize(l.len, ' ');
      text.replace(i, l.len, s);
      i += l.len - 1;
      replaced = true;
      break;
    }
  }
  return replaced ? marker : 0;
}

bool looks_like_ubjson(const std::string& b) {
  return b.size() >= 2 && b[0] == '{' && b[1] != '\0' && std::strchr("iUIlL$#", b[1]) != nullptr;
}

std::string json_message(const json::exception& e) {
  std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 3, ..."
  if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
    what = what.substr(what.find("] ") + 2);
  return what;
}

}  // namespace canopy::io_detail
