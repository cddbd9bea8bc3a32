// The example program's own data structure: a point-region quadtree over cities, built directly
// as a Boost.Graph (the program knows nothing of Canopy's layouts; canopy::flatten_tree turns
// the graph into the tree Canopy walks). Also the city reader and the query boxes. Shared by
// examples/quadtree_cities.cpp and tests/test_graph_example.cpp; g++ only (Boost, zlib).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <deque>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "examples/box_count.hpp"
#include "io/dataset.hpp"
#include "io/line_reader.hpp"

namespace box_count {

// Edges go parent -> child; out-edge lists (vecS) keep the children in insertion order.
using CityGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, QuadCell>;

struct Cities {
  std::vector<float> xy;  // [n][2]
  std::string x_name, y_name;
  index_t size() const { return static_cast<index_t>(xy.size() / 2); }
};

// Reads a CSV (plain or gzip) with a header row. x and y are the columns named lon / lat
// (longitude / latitude, or x / y) when the header has them, else the first two columns.
// Errors (canopy::Error) name the file, and the line for a bad row.
inline Cities read_cities(const std::string& path) {
  std::vector<std::string> header;
  {
    canopy::LineReader in(path);
    std::string line;
    if (!in.next(line)) throw canopy::Error(path + ": the file is empty (a header row is expected)");
    std::string field;
    for (std::size_t i = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == ',') {
        header.push_back(field);
        field.clear();
      } else if (!std::isspace(static_cast<unsigned char>(line[i])) && line[i] != '"') {
        field += static_cast<char>(std::tolower(static_cast<unsigned char>(line[i])));
      }
    }
  }
  if (header.size() < 2)
    throw canopy::Error(path + ":1: the header has " + std::to_string(header.size()) +
                        " column; two numeric columns (x, y or lat, lon) are needed");
  auto find = [&](std::initializer_list<const char*> names) {
    for (const char* name : names)
      for (std::size_t c = 0; c < header.size(); ++c)
        if (header[c] == name) return static_cast<int>(c);
    return -1;
  };
  int xc = find({"lon", "lng", "longitude", "x"}), yc = find({"lat", "latitude", "y"});
  if (xc < 0 || yc < 0 || xc == yc) {
    xc = 0;
    yc = 1;
  }
  const canopy::PointSet ps = canopy::read_csv(path, std::to_string(xc) + "," + std::to_string(yc));
  Cities c;
  c.xy = ps.coords;
  c.x_name = ps.names[0];
  c.y_name = ps.names[1];
  return c;
}

struct QuadtreeParams {
  index_t leaf_size = 16;  // a cell holding more cities than this is split...
  int max_depth = 16;      // ...while its depth (the root's is 0) is below this
};

struct CityQuadtree {
  CityGraph graph;              // vertex 0 is the root, the others in breadth-first order
  std::vector<float> cities;    // [n][2]: the cities in leaf order (what QuadCell ranges index)
  std::vector<index_t> row_of;  // leaf-order position -> the city's row in the input
};

// Splits a cell into its four quadrants (SW, SE, NW, NE: x < mid goes west, y < mid south)
// while it holds more than leaf_size cities and its depth is below max_depth; only non-empty
// quadrants become children, so an inner node has 1 to 4. The root's cell is the cities'
// bounding box; each child's cell is its quadrant, closed, so it contains all its cities.
inline CityQuadtree build_quadtree(const std::vector<float>& xy, const QuadtreeParams& p = {}) {
  const index_t n = static_cast<index_t>(xy.size() / 2);
  CityQuadtree t;
  t.row_of.resize(static_cast<std::size_t>(n));
  std::iota(t.row_of.begin(), t.row_of.end(), index_t{0});
  QuadCell root;
  if (n > 0) {
    root.x0 = root.x1 = xy[0];
    root.y0 = root.y1 = xy[1];
  }
  for (index_t i = 0; i < n; ++i) {
    root.x0 = std::min(root.x0, xy[2 * i]);
    root.x1 = std::max(root.x1, xy[2 * i]);
    root.y0 = std::min(root.y0, xy[2 * i + 1]);
    root.y1 = std::max(root.y1, xy[2 * i + 1]);
  }
  root.first = 0;
  root.count = n;

  using Vertex = CityGraph::vertex_descriptor;
  struct Pending {
    Vertex v;
    int depth;
  };
  std::deque<Pending> queue{{add_vertex(root, t.graph), 0}};
  while (!queue.empty()) {
    const Pending c = queue.front();
    queue.pop_front();
    const QuadCell cell = t.graph[c.v];  // a copy: add_vertex may move the bundles
    if (cell.count <= p.leaf_size || c.depth >= p.max_depth) continue;  // a leaf
    const float mx = 0.5f * (cell.x0 + cell.x1), my = 0.5f * (cell.y0 + cell.y1);
    index_t* const b = t.row_of.data() + cell.first;
    index_t* const e = b + cell.count;
    index_t* const south_end = std::partition(b, e, [&](index_t r) { return xy[2 * r + 1] < my; });
    auto west = [&](index_t r) { return xy[2 * r] < mx; };
    index_t* const sw_end = std::partition(b, south_end, west);
    index_t* const nw_end = std::partition(south_end, e, west);
    const struct {
      index_t* from;
      index_t* to;
      float x0, y0, x1, y1;
    } quadrants[4] = {{b, sw_end, cell.x0, cell.y0, mx, my},
                      {sw_end, south_end, mx, cell.y0, cell.x1, my},
                      {south_end, nw_end, cell.x0, my, mx, cell.y1},
                      {nw_end, e, mx, my, cell.x1, cell.y1}};
    t.graph[c.v].count = 0;  // now an inner node
    for (const auto& q : quadrants) {
      if (q.from == q.to) continue;
      const QuadCell child{q.x0, q.y0, q.x1, q.y1, q.from - t.row_of.data(), q.to - q.from};
      const Vertex u = add_vertex(child, t.graph);
      add_edge(c.v, u, t.graph);
      queue.push_back({u, c.depth + 1});
    }
  }
  t.cities.resize(xy.size());
  for (index_t i = 0; i < n; ++i) {
    t.cities[2 * i] = xy[2 * t.row_of[i]];
    t.cities[2 * i + 1] = xy[2 * t.row_of[i] + 1];
  }
  return t;
}

// m query boxes [m][4] (x0, y0, x1, y1), deterministic for a seed: each is a square centred on
// a random city whose half-width is the half-side of the leaf cell holding that city times a
// random factor in [0.5, 1.5], so a box holds tens of cities in dense and sparse regions alike.
inline std::vector<float> make_query_boxes(const CityQuadtree& t, index_t m, std::uint64_t seed) {
  const index_t n = static_cast<index_t>(t.cities.size() / 2);
  std::vector<float> boxes(static_cast<std::size_t>(4 * m), 0.0f);
  if (n == 0) return boxes;
  std::vector<float> scale(static_cast<std::size_t>(n), 0.0f);  // by leaf-order position
  for (auto [v, vend] = vertices(t.graph); v != vend; ++v) {
    if (out_degree(*v, t.graph) != 0) continue;
    const QuadCell& c = t.graph[*v];
    for (index_t i = c.first; i < c.first + c.count; ++i) scale[i] = 0.5f * std::max(c.x1 - c.x0, c.y1 - c.y0);
  }
  std::mt19937_64 rng(seed);
  // 53 random bits by hand: std::uniform_real_distribution's algorithm is the library's.
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1p-53; };
  for (index_t q = 0; q < m; ++q) {
    const index_t i = static_cast<index_t>(unit() * static_cast<double>(n));
    const float h = static_cast<float>(scale[i] * (0.5 + unit()));
    const float x = t.cities[2 * i], y = t.cities[2 * i + 1];
    boxes[4 * q] = x - h;
    boxes[4 * q + 1] = y - h;
    boxes[4 * q + 2] = x + h;
    boxes[4 * q + 3] = y + h;
  }
  return boxes;
}

}  // namespace box_count
