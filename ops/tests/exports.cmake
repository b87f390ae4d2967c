# ops/tests/exports.cmake: every function kvtile_ops.h declares (KVTILE_OPS_API)
# is a defined, exported symbol of LIBRARY, and LIBRARY exports no other
# kvtile_ops_* function.
#   cmake -DHEADER=ops/include/kvtile_ops.h -DLIBRARY=libkvtile_ops.so -DNM=nm -P ops/tests/exports.cmake
foreach(_v IN ITEMS HEADER LIBRARY NM)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "exports.cmake: set -D${_v}=...")
  endif()
endforeach()

file(READ "${HEADER}" _header)
string(REGEX MATCHALL "KVTILE_OPS_API[^(;]*[ *](kvtile_ops_[a-z0-9_]+)\\(" _decls "${_header}")
set(_declared "")
foreach(_d IN LISTS _decls)
  string(REGEX REPLACE ".*[ *](kvtile_ops_[a-z0-9_]+)\\($" "\\1" _name "${_d}")
  list(APPEND _declared "${_name}")
endforeach()
list(LENGTH _declared _n)
if(_n LESS 10)
  message(FATAL_ERROR "exports.cmake: found only ${_n} declarations in ${HEADER}: the pattern is out of date")
endif()

execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}"
  OUTPUT_VARIABLE _nm RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "exports.cmake: ${NM} -D ${LIBRARY} failed: ${_err}")
endif()
string(REGEX MATCHALL "[ \t][TW][ \t]+kvtile_ops_[a-z0-9_]+" _defs "${_nm}")
set(_exported "")
foreach(_d IN LISTS _defs)
  string(REGEX REPLACE ".*(kvtile_ops_[a-z0-9_]+)$" "\\1" _name "${_d}")
  list(APPEND _exported "${_name}")
endforeach()

set(_missing "${_declared}")
list(REMOVE_ITEM _missing ${_exported})
set(_extra "${_exported}")
list(REMOVE_ITEM _extra ${_declared})
if(_missing OR _extra)
  message(FATAL_ERROR "exports.cmake: ${LIBRARY}\n  declared in kvtile_ops.h, not exported: ${_missing}\n"
                      "  exported, not declared: ${_extra}")
endif()
message(STATUS "exports.cmake: ${LIBRARY} exports the ${_n} functions of kvtile_ops.h")
