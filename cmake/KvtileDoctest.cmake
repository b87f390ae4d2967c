# KvtileDoctest.cmake: kvtile_find_doctest(), for the directories that build
# doctest executables (tests/, tools/kvtile-eval/tests/).
#
# A macro: doctest_FOUND, the imported target doctest::doctest and the module
# path of doctest's package (include(doctest): doctest_discover_tests) are
# directory-scoped, so each directory finds doctest itself. doctest: its CMake
# package, or else a bare header carried as .deps/doctest/doctest.h (machines
# without the Debian package). Missing: an error with KVTILE_REQUIRE_DEPS,
# else a warning (doctest_FOUND false).
macro(kvtile_find_doctest)
  find_package(doctest 2.4 CONFIG QUIET)
  if(NOT doctest_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.deps/doctest/doctest.h")
    if(NOT TARGET doctest::doctest)
      add_library(doctest::doctest INTERFACE IMPORTED)
      set_target_properties(doctest::doctest PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/.deps")
    endif()
    set(doctest_FOUND TRUE)
    message(STATUS "kvtile: using doctest header from .deps/doctest (${CMAKE_CURRENT_SOURCE_DIR})")
  elseif(NOT doctest_FOUND)
    find_package(doctest 2.4 CONFIG ${KVTILE_DEP_MODE})  # the error (KVTILE_REQUIRE_DEPS) or a warning, with details
  endif()
endmacro()

# kvtile_doctest_register(<target> <fallback test name> <label>)
#   One CTest test per TEST_CASE, named host/<test case> (doctest's module,
#   from its package), labelled <label>; without the module (the bare .deps
#   header) one test <fallback test name> running the whole executable.
function(kvtile_doctest_register target fallback label)
  include(doctest OPTIONAL RESULT_VARIABLE _doctest_module)  # doctest's package adds it
  if(_doctest_module)
    doctest_discover_tests(${target} TEST_PREFIX "host/" PROPERTIES LABELS ${label})
  else()
    add_test(NAME ${fallback} COMMAND ${target})
    set_tests_properties(${fallback} PROPERTIES LABELS ${label})
  endif()
endfunction()
