# Fails when a shared library exports a dynamic symbol of kvtile's namespace:
# a function, kernel stub, variable, vtable, typeinfo or guard named
# kvtile::... (mangled _ZN6kvtile..., _ZNK6kvtile..., _ZTVN6kvtile...,
# _ZZN6kvtile..., _ZGVZN6kvtile...). Instantiations of the standard library's
# templates on kvtile types (std::forward<kvtile::v0_2::frame&>, emitted
# out of line at -O0) are std's names with std's visibility; their code does
# not depend on how kvtile was tuned, so they are not counted.
# cmake -DNM=nm -DLIBS=a.so;b.so -P check_hidden.cmake
foreach(_lib IN LISTS LIBS)
  execute_process(COMMAND "${NM}" -D --defined-only "${_lib}" OUTPUT_VARIABLE _syms RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${_lib}")
  endif()
  string(REGEX MATCHALL "[^\n]* _Z(T[VITS]|GV)?Z?N[rVKRO]*6kvtile[^\n]*" _leaks "${_syms}")
  list(LENGTH _leaks _n)
  if(_n GREATER 0)
    list(GET _leaks 0 _first)
    message(FATAL_ERROR "${_lib} exports ${_n} kvtile symbols, e.g. ${_first} (c++filt names it)")
  endif()
  string(REGEX MATCHALL "kvtile_abi_[ab]_[a-z_]+" _own "${_syms}")
  list(LENGTH _own _m)
  if(_m LESS 3)
    message(FATAL_ERROR "${_lib} does not export its 3 entry points (found ${_m})")
  endif()
  message(STATUS "${_lib}: no kvtile symbol exported, ${_m} entry points")
endforeach()
