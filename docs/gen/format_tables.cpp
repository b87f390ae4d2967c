// docs/gen/format_tables.cpp: prints the generated tables of docs/format.md.
//
//   g++ -std=c++17 -I include docs/gen/format_tables.cpp -o /tmp/format_tables && /tmp/format_tables
//
// tests/host/format_doc.cpp fails when docs/format.md no longer contains
// these tables verbatim.
#include <cstdio>

#include "format_tables.hpp"

int main() {
  for (const kvtile_docs::table& t : kvtile_docs::all_tables())
    std::printf("<!-- generated: %s -->\n%s\n", t.title, t.markdown.c_str());
  return 0;
}
