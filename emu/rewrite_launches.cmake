# cmake -DIN=<file.cu> -DOUT=<file> -DREL=<path for messages> -P rewrite_launches.cmake
# Writes IN to OUT with each CUDA launch `kernel<<<grid, block, smem, stream>>>(args)` turned into the
# emulator's `::gnn_emu::launch("kernel", kernel, grid, block, smem, stream)(args)` (emu/include/cuda_runtime.h).
# The kernel is a name, optionally with one level of template arguments (fill_kernel<T>,
# act_fwd_kernel<decltype(A)::value>), as every launch in gnn is written; clang-format may break the
# line between the kernel and its `<<<` (kept inside the call, so line numbers stay).
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_:]*(<[^<>;]*>)?)([ \t\n]*)<<<" "::gnn_emu::launch(GNN_EMU_STR(\\1), \\1,\\3 " src "${src}")
string(REPLACE ">>>(" ")(" src "${src}")
if(src MATCHES "<<<|>>>")
  message(FATAL_ERROR "${REL}: a kernel launch the emulator's rewrite does not recognise")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${REL}\"\n${src}")
file(RENAME "${OUT}.tmp" "${OUT}")
