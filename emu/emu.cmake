# The CUDA emulator flavour (emu/README.md): libgnn, the apps and the CLI built again with the CUDA
# sources compiled for the host against emu/include, so the CUDA backend runs, and is tested, on machines
# without a GPU (and without the CUDA toolkit). Included from the top-level CMakeLists.txt, whose source
# lists (and per-file flags such as the AVX2 micro-kernels') it reuses.
set(_emu_out ${CMAKE_BINARY_DIR}/emu_src)

# Writes <build>/emu_src/<rel> (.cu files: <rel>.cpp) with the launches rewritten; the path goes in out_var.
function(gnn_emu_rewrite rel out_var)
  if(rel MATCHES "\\.cu$")
    set(out ${_emu_out}/${rel}.cpp)
  else()
    set(out ${_emu_out}/${rel})
  endif()
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_SOURCE_DIR}/${rel} -DOUT=${out} -DREL=${rel}
            -P ${CMAKE_SOURCE_DIR}/emu/rewrite_launches.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/${rel} ${CMAKE_SOURCE_DIR}/emu/rewrite_launches.cmake
    COMMENT "emu: rewriting the kernel launches of ${rel}" VERBATIM)
  # Device code in the emulator: a misaligned access (a float4 store off 16 bytes) stops the run, as it
  # faults on the GPU.
  set_source_files_properties(${out} PROPERTIES COMPILE_OPTIONS
    "-fsanitize=alignment;-fno-sanitize-recover=alignment;-Wno-unknown-pragmas")
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

# The emulator itself: the CUDA runtime, cuBLAS and cuSPARSE (emu/emu_state.h says which part is where).
set(_emu_sources ${GNN_HOST_SOURCES} emu/runtime_api.cpp emu/memory.cpp emu/streams.cpp emu/engine.cpp
    emu/cublas.cpp emu/cusparse.cpp emu/nccl_emu.cpp)
set(_emu_generated)
foreach(f ${GNN_CUDA_SOURCES} ${GNN_CUDA_HEADERS})
  if(f MATCHES "\\.(cu|cuh)$")
    gnn_emu_rewrite(${f} out)
    list(APPEND _emu_generated ${out})
  else()
    list(APPEND _emu_sources ${f})
  endif()
endforeach()

add_library(gnn_core_emu STATIC ${_emu_sources} ${_emu_generated})
# the rewritten .cuh headers before the originals; the emulator's cuda_runtime.h, cublas_v2.h, cusparse.h
target_include_directories(gnn_core_emu BEFORE PRIVATE ${_emu_out})
target_include_directories(gnn_core_emu PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/emu/include)
gnn_core_settings(gnn_core_emu)
# NCCL's all-reduce over a job of one rank (emu/nccl_emu.cpp): the GPU reduction path of dist/ runs here.
target_compile_definitions(gnn_core_emu PUBLIC GNN_WITH_CUDA=1 GNN_CUDA_EMU=1 GNN_WITH_NCCL=1)
target_link_options(gnn_core_emu INTERFACE -fsanitize=alignment)

add_library(gnn_bench_registry_emu STATIC ${GNN_BENCH_REGISTRY_SOURCES})
target_link_libraries(gnn_bench_registry_emu PUBLIC gnn_core_emu)
add_library(gnn_apps_emu STATIC ${GNN_APPS_SOURCES})
target_link_libraries(gnn_apps_emu PUBLIC gnn_core_emu gnn_bench_registry_emu)
add_executable(gnn_cli_emu ${GNN_CLI_SOURCES})
set_target_properties(gnn_cli_emu PROPERTIES OUTPUT_NAME gnn_emu)
target_link_libraries(gnn_cli_emu PRIVATE gnn_apps_emu)
