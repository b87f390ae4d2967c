# KvtileTargets.cmake: settings shared by kvtile's own executables.
# Everything here is set per target (PRIVATE), never per directory, so nothing
# reaches a project that add_subdirectory()s kvtile.

# kvtile_host_target(<target>)
#   Links kvtile::kvtile and applies warnings (-Wall -Wextra, -Werror when
#   KVTILE_WERROR) and KVTILE_SANITIZE to the target's C++ sources.
function(kvtile_host_target target)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_link_libraries(${target} PRIVATE kvtile::kvtile)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")
    if(KVTILE_WERROR)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
    endif()
  elseif(MSVC)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/W4;/permissive->")
    if(KVTILE_WERROR)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/WX>")
    endif()
  endif()
  if(NOT KVTILE_SANITIZE STREQUAL "")
    string(REPLACE "," "$<COMMA>" _san "${KVTILE_SANITIZE}")
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
    target_link_options(${target} PRIVATE "-fsanitize=${KVTILE_SANITIZE}")
  endif()
endfunction()

# kvtile_cuda_target(<target> [TEST])
#   For targets with .cu sources: CUDA 17, KVTILE_CUDA_ARCHITECTURES (TEST: the
#   tests', benchmarks' and tools' KVTILE_TEST_ARCHS, KvtileCuda.cmake), shared
#   cudart, -lineinfo (for profilers; TEST under KVTILE_TEST_CUDA_UNOPTIMIZED:
#   -G instead). --expt-relaxed-constexpr comes from
#   kvtile::kvtile itself. Never --use_fast_math.
function(kvtile_cuda_target target)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "TEST" "" "")
  if(_arg_TEST)
    set(_archs "${KVTILE_TEST_ARCHS}")
  else()
    set(_archs "${KVTILE_CUDA_ARCHITECTURES}")
  endif()
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES "${_archs}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_EXTENSIONS OFF
    CUDA_RUNTIME_LIBRARY Shared)
  target_link_libraries(${target} PRIVATE kvtile::kvtile CUDA::cudart)
  if(_arg_TEST AND KVTILE_TEST_CUDA_UNOPTIMIZED)
    # -G replaces -lineinfo (nvcc warns when both are given).
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANG_AND_ID:CUDA,NVIDIA>:-G>")
  else()
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANG_AND_ID:CUDA,NVIDIA>:-lineinfo>")
  endif()
endfunction()

# kvtile_stem(<out-var> <file>): file name without directory and last extension.
function(kvtile_stem out file)
  get_filename_component(_stem "${file}" NAME_WLE)
  set(${out} "${_stem}" PARENT_SCOPE)
endfunction()
