#include "io/forest_data.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "io/line_reader.hpp"

namespace canopy {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

// [b, e) without surrounding blanks and double quotes.
void trim(const char*& b, const char*& e) {
  while (b < e && (is_space(*b) || *b == '"')) ++b;
  while (e > b && (is_space(e[-1]) || e[-1] == '"')) --e;
}

bool is_nan_text(const char* b, const char* e) {
  return e - b == 3 && (b[0] == 'n' || b[0] == 'N') && (b[1] == 'a' || b[1] == 'A') && (b[2] == 'n' || b[2] == 'N');
}

// Parses [b, e) (already trimmed, not empty) as a double; false if it is not a number.
bool parse_number(const char* b, const char* e, double& out) {
  char* end = nullptr;
  out = std::strtod(b, &end);  // stops at the comma (or the end of the line) at the latest
  return end == e && end != b;
}

std::vector<std::pair<const char*, const char*>> split(const std::string& line) {
  std::vector<std::pair<const char*, const char*>> f;
  const char* s = line.c_str();
  const char* end = s + line.size();
  for (;;) {
    const char* comma = static_cast<const char*>(std::memchr(s, ',', static_cast<std::size_t>(end - s)));
    const char* fe = comma ? comma : end;
    f.emplace_back(s, fe);
    if (!comma) return f;
    s = comma + 1;
  }
}

}  // namespace

ForestData read_forest_csv(const std::string& path, const std::string& label) {
  LineReader in(path);
  std::string line;
  if (!in.next(line)) throw Error(path + ": the file is empty (a header row is expected)");
  std::vector<std::string> header;
  for (auto [b, e] : split(line)) {
    trim(b, e);
    header.emplace_back(b, e);
  }
  const int n_fields = static_cast<int>(header.size());
  int label_col = -1;
  if (!label.empty()) {
    for (int c = 0; c < n_fields; ++c)
      if (header[c] == label) label_col = c;
    if (label_col < 0 && label.find_first_not_of("0123456789") == std::string::npos && label.size() < 9) {
      label_col = std::atoi(label.c_str());
      if (label_col >= n_fields)
        throw Error(path + ": label column " + label + " is out of range (the header has " +
                    std::to_string(n_fields) + " columns, 0.." + std::to_string(n_fields - 1) + ")");
    }
    if (label_col < 0) {
      std::string cols;
      for (const std::string& h : header) cols += (cols.empty() ? "" : ", ") + h;
      throw Error(path + ": there is no label column '" + label + "' (the header has: " + cols + ")");
    }
  }
  ForestData d;
  d.n_features = n_fields - (label_col >= 0 ? 1 : 0);
  if (d.n_features < 1) throw Error(path + ": no feature columns");
  for (int c = 0; c < n_fields; ++c)
    if (c != label_col) d.feature_names.push_back(header[c]);
  if (label_col >= 0) d.label_name = header[label_col];

  index_t line_no = 1;
  while (in.next(line)) {
    ++line_no;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const auto fields = split(line);
    if (static_cast<int>(fields.size()) != n_fields)
      throw Error(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(n_fields) +
                  " fields (as in the header), found " + std::to_string(fields.size()));
    for (int c = 0; c < n_fields; ++c) {
      const char* b = fields[c].first;
      const char* e = fields[c].second;
      trim(b, e);
      double v = 0;
      const bool missing = b == e || is_nan_text(b, e);
      if (!missing && !parse_number(b, e, v))
        throw Error(path + ":" + std::to_string(line_no) + ": column " + std::to_string(c) + " (" + header[c] +
                    "): '" + std::string(b, e) + "' is not a number");
      if (c == label_col) {
        if (missing || !std::isfinite(v))
          throw Error(path + ":" + std::to_string(line_no) + ": the label (column " + std::to_string(c) + ", " +
                      header[c] + ") is missing or not finite");
        d.labels.push_back(v);
      } else {
        d.values.push_back(missing ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v));
      }
    }
    ++d.n_rows;
  }
  if (d.n_rows == 0) throw Error(path + ": no data rows after the header");
  return d;
}

void check_forest_data(const ForestData& data, const std::string& data_path, const Forest& forest) {
  if (data.n_features != forest.n_features())
    throw Error(data_path + ": " + std::to_string(data.n_features) + " feature columns" +
                (data.label_name.empty() ? std::string() : " (besides the label '" + data.label_name + "')") +
                ", but the model " + forest.source() + " has " + std::to_string(forest.n_features()) +
                " features" + (data.label_name.empty() ? " (is a label column to be named with --label?)" : ""));
}

void write_predictions(const std::string& path, const float* out, index_t n_rows, int width) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  std::string buf;
  char num[32];
  for (index_t i = 0; i < n_rows; ++i) {
    for (int k = 0; k < width; ++k) {
      std::snprintf(num, sizeof num, "%.9g", static_cast<double>(out[i * width + k]));
      if (k) buf += ',';
      buf += num;
    }
    buf += '\n';
    if (buf.size() > (1 << 20) || i + 1 == n_rows) {
      if (std::fwrite(buf.data(), 1, buf.size(), f) != buf.size()) {
        std::fclose(f);
        throw Error(path + ": write error");
      }
      buf.clear();
    }
  }
  if (std::fclose(f) != 0) throw Error(path + ": write error");
}

}  // namespace canopy
