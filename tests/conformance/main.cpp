// main() of tensordict_conformance: googletest, plus a listener that records
// the result of every cell and turns them into the two matrices of
// docs/compatibility.md.
//
//   tensordict_conformance                         run the suite (gtest flags work)
//   tensordict_conformance --matrix                ... and print the matrices
//   tensordict_conformance --check-doc=PAGE        ... and compare them with PAGE's
//                                                  (exit 1 with a diff when they differ)
//   tensordict_conformance --update-doc=PAGE       ... and rewrite PAGE's matrices
//
// In PAGE each matrix sits between the lines
//   <!-- BEGIN conformance matrix: TensorClass -->
//   <!-- END conformance matrix: TensorClass -->
// (likewise TypedTensorDict). A cell reads "yes" when its test passes, the
// text the test recorded when it passes with a caveat ("`set_()`"), "no" when
// it fails, "skipped" when skipped.
#include "conformance.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace conformance {
namespace {

constexpr std::array<const char*, 8> kColumns = {"Build", "Read",  "Write", "Index",
                                                 "Clone", "Stack", "Iter",  "Update"};
constexpr std::array<const char*, 2> kWrappers = {"TensorClass", "TypedTensorDict"};

struct Row {
  int rank = 0;
  std::map<std::string, std::string> cells;  // column -> text
};
/// wrapper -> storage label -> row.
using Matrix = std::map<std::string, std::map<std::string, Row>>;

class MatrixRecorder : public ::testing::EmptyTestEventListener {
 public:
  explicit MatrixRecorder(Matrix& matrix) : matrix_(matrix) {}

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const std::string suite = info.test_suite_name();
    const std::string_view tail = "/Conformance";
    if (suite.size() < tail.size() || suite.compare(suite.size() - tail.size(), tail.size(), tail))
      return;
    std::string name = info.name();         // "TensorClass_Write/memmap"
    name = name.substr(0, name.find('/'));  // "TensorClass_Write"
    const auto sep = name.rfind('_');
    if (sep == std::string::npos) return;
    const std::string wrapper = name.substr(0, sep), column = name.substr(sep + 1);

    const ::testing::TestResult& result = *info.result();
    std::string storage = "?", cell = "yes";
    int rank = 0;
    for (int i = 0; i < result.test_property_count(); ++i) {
      const ::testing::TestProperty& p = result.GetTestProperty(i);
      const std::string key = p.key();
      if (key == kStorageProperty) storage = p.value();
      if (key == kRankProperty) rank = std::atoi(p.value());
      if (key == kCellProperty) cell = p.value();
    }
    if (result.Skipped())
      cell = "skipped";
    else if (result.Failed())
      cell = "no";
    Row& row = matrix_[wrapper][storage];
    row.rank = rank;
    row.cells[column] = cell;
  }

 private:
  Matrix& matrix_;
};

std::string begin_marker(const std::string& wrapper) {
  return "<!-- BEGIN conformance matrix: " + wrapper + " -->";
}
std::string end_marker(const std::string& wrapper) {
  return "<!-- END conformance matrix: " + wrapper + " -->";
}

/// The Markdown table of one wrapper, one line per element.
std::vector<std::string> render(const Matrix& matrix, const std::string& wrapper) {
  std::string header = "| storage |", rule = "| --- |";
  for (const char* c : kColumns) {
    header += std::string(" ") + c + " |";
    rule += " --- |";
  }
  std::vector<std::string> lines = {header, rule};
  auto it = matrix.find(wrapper);
  if (it == matrix.end()) return lines;
  std::vector<std::pair<std::string, Row>> rows(it->second.begin(), it->second.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& x, const auto& y) { return x.second.rank < y.second.rank; });
  for (const auto& [label, row] : rows) {
    std::string line = "| " + label + " |";
    for (const char* c : kColumns) {
      auto cell = row.cells.find(c);
      line += " " + (cell == row.cells.end() ? std::string("not run") : cell->second) + " |";
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// The lines between the markers of `wrapper` in `page` as [first, last)
/// indices, or nullopt when the markers are missing.
std::optional<std::pair<std::size_t, std::size_t>> block(const std::vector<std::string>& page,
                                                         const std::string& wrapper) {
  auto b = std::find(page.begin(), page.end(), begin_marker(wrapper));
  if (b == page.end()) return std::nullopt;
  auto e = std::find(b, page.end(), end_marker(wrapper));
  if (e == page.end()) return std::nullopt;
  return std::pair<std::size_t, std::size_t>(b - page.begin() + 1, e - page.begin());
}

/// A line diff (longest common subsequence): " " kept, "-" only in the
/// page, "+" only in the suite's result.
std::string diff(const std::vector<std::string>& page, const std::vector<std::string>& suite) {
  const std::size_t n = page.size(), m = suite.size();
  std::vector<std::vector<std::size_t>> lcs(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = n; i-- > 0;)
    for (std::size_t j = m; j-- > 0;)
      lcs[i][j] =
          page[i] == suite[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && page[i] == suite[j]) {
      out += "  " + page[i++] + "\n";
      ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out += "- " + page[i++] + "\n";
    } else {
      out += "+ " + suite[j++] + "\n";
    }
  }
  return out;
}

/// The cells of a table line ("| a | b |" -> {"a", "b"}).
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = line.find('|');
  while (start != std::string::npos) {
    const std::size_t end = line.find('|', start + 1);
    if (end == std::string::npos) break;
    std::string cell = line.substr(start + 1, end - start - 1);
    const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
    out.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    start = end;
  }
  return out;
}

/// One line per cell that differs between rows of the same label:
/// "`TensorDict` (memmap) x Write: the page says yes, the suite `set_()`".
std::string cell_changes(const std::vector<std::string>& page,
                         const std::vector<std::string>& suite) {
  std::map<std::string, std::vector<std::string>> documented;
  for (const auto& line : page) {
    auto cells = cells_of(line);
    if (!cells.empty()) documented[cells.front()] = cells;
  }
  std::string out;
  for (const auto& line : suite) {
    const auto cells = cells_of(line);
    if (cells.empty() || cells.front() == "storage" || cells.front() == "---") continue;
    auto it = documented.find(cells.front());
    if (it == documented.end()) {
      out += "  " + cells.front() + ": a row the page lacks\n";
      continue;
    }
    for (std::size_t c = 1; c < cells.size() && c <= kColumns.size(); ++c) {
      const std::string old = c < it->second.size() ? it->second[c] : "(missing)";
      if (old != cells[c])
        out += "  " + cells.front() + " x " + kColumns[c - 1] + ": the page says " + old +
               ", the suite " + cells[c] + "\n";
    }
    documented.erase(it);
  }
  for (const auto& [label, cells] : documented)
    if (label != "storage" && label != "---")
      out += "  " + label + ": a row the suite did not produce\n";
  return out;
}

/// Row labels of storages whose component is not built: the page may show
/// them, the check skips them.
std::vector<std::string>& absent_rows() {
  static std::vector<std::string> rows;
  return rows;
}

/// Compares (or, with `update`, rewrites) the matrices of the page. Returns
/// false when they differ (check) or the page cannot be used.
bool sync_page(const Matrix& matrix, const std::string& path, bool update) {
  std::optional<std::string> text = read_file(path);
  if (!text) {
    std::cerr << "conformance: cannot read " << path << "\n";
    return false;
  }
  std::vector<std::string> page = split_lines(*text);
  bool same = true;
  for (const char* wrapper : kWrappers) {
    auto range = block(page, wrapper);
    if (!range) {
      std::cerr << "conformance: " << path << " lacks the lines\n  " << begin_marker(wrapper)
                << "\n  " << end_marker(wrapper) << "\n";
      return false;
    }
    std::vector<std::string> documented(page.begin() + range->first, page.begin() + range->second);
    // Rows of storage components this build lacks (--absent-row=LABEL).
    if (!update)
      std::erase_if(documented, [](const std::string& line) {
        auto cells = cells_of(line);
        return !cells.empty() && std::find(absent_rows().begin(), absent_rows().end(),
                                           cells.front()) != absent_rows().end();
      });
    const std::vector<std::string> measured = render(matrix, wrapper);
    if (documented == measured) continue;
    same = false;
    if (update) {
      page.erase(page.begin() + range->first, page.begin() + range->second);
      page.insert(page.begin() + range->first, measured.begin(), measured.end());
    } else {
      std::cerr << "conformance: the " << wrapper << " matrix of " << path
                << " differs from the suite's results:\n"
                << cell_changes(documented, measured) << "Lines (- page, + suite):\n"
                << diff(documented, measured) << "\n";
    }
  }
  if (update && !same) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (const auto& line : page) out << line << "\n";
    if (!out) {
      std::cerr << "conformance: cannot write " << path << "\n";
      return false;
    }
    std::cout << "conformance: updated the matrices of " << path << "\n";
  }
  if (!update && !same)
    std::cerr << "If the change is intended, regenerate the page:\n"
              << "  tensordict_conformance --update-doc=" << path << "\n"
              << "and update its notes for any cell that is not \"yes\".\n";
  return update || same;
}

}  // namespace
}  // namespace conformance

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string check_doc, update_doc;
  bool print = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty()) continue;  // an empty generator expression in the CTest command
    if (arg.rfind("--check-doc=", 0) == 0)
      check_doc = arg.substr(12);
    else if (arg.rfind("--update-doc=", 0) == 0)
      update_doc = arg.substr(13);
    else if (arg == "--matrix")
      print = true;
    else if (arg.rfind("--absent-row=", 0) == 0)
      conformance::absent_rows().push_back(arg.substr(13));
    else {
      std::cerr
          << "tensordict_conformance: unknown argument " << arg
          << " (googletest's, --matrix, --check-doc=PAGE, --update-doc=PAGE, --absent-row=LABEL)\n";
      return 2;
    }
  }
  conformance::Matrix matrix;
  ::testing::UnitTest::GetInstance()->listeners().Append(new conformance::MatrixRecorder(matrix));
  const int rc = RUN_ALL_TESTS();
  if (print)
    for (const char* wrapper : conformance::kWrappers) {
      std::cout << "\n" << wrapper << ":\n";
      for (const auto& line : conformance::render(matrix, wrapper)) std::cout << line << "\n";
    }
  if (!update_doc.empty() && !conformance::sync_page(matrix, update_doc, /*update=*/true)) return 1;
  if (!check_doc.empty())
    return conformance::sync_page(matrix, check_doc, /*update=*/false) ? 0 : 1;
  return rc;
}
