#!/bin/bash
# Stand-in for the build.sh msopgen writes into an Ascend C op project (CANN 8.x op project template), written
# from that template's documented behaviour. What it does, in the real build's order:
#   1. refuses to run without the CANN environment (ASCEND_HOME_PATH);
#   2. reads CMakePresets.json with `python3 cmake/util/preset_parse.py` (the first python3 on PATH);
#   3. the configure step's opbuild: compiles and links EVERY top-level source of op_host/ (op_host/CMakeLists.txt:
#      aux_source_directory; subfolders are not compiled) with g++ -std=c++14 -fPIC -shared against
#      $ASCEND_CANN_PACKAGE_PATH/include (here: stand-in headers) and op_kernel/, into one library, as CANN's
#      opbuild does: a missing header, a compile error or a symbol defined twice fails here;
#   4. the kernel build: for each op type the sources register (OP_ADD), compiles op_kernel/<snake>.cpp with
#      the ASCEND_PYTHON_EXECUTABLE of the presets (python3), whose CANN packages (tbe) need CANN's Python
#      requirements, for the presets' ASCEND_COMPUTE_UNIT; nothing is compiled for the device here: the step checks
#      the file, the Python, the kernel entry against the call CANN's generated wrapper makes, the DTYPE_<NAME>
#      macros it defines, the tiling data's op type and the OpDef's AddConfig (tools/fake_compile_kernel.py);
#   5. packs build_out/custom_opp_<os>_<arch>.run, whose op API (libcust_opapi.so) runs AddCustom on the host.
if [ -z "$ASCEND_HOME_PATH" ]; then
  echo "please set env."
  exit 1
fi
script_path=$(realpath "$(dirname "$0")")
cd "$script_path" || exit 1
mkdir -p build_out
rm -rf build_out/*
opts=$(python3 "$script_path/cmake/util/preset_parse.py" "$script_path/CMakePresets.json") || {
  echo "preset_parse.py failed under $(command -v python3)"; exit 1; }
cann=$(printf '%s\n' $opts | sed -n 's/^-DASCEND_CANN_PACKAGE_PATH=//p')
pyexe=$(printf '%s\n' $opts | sed -n 's/^-DASCEND_PYTHON_EXECUTABLE=//p')
echo "ASCEND_CUSTOM_OPP_PATH=${ASCEND_CUSTOM_OPP_PATH-unset}" > build_out/env.txt
(cd op_host && ls) > build_out/op_host.txt
(cd op_kernel && find . -type f | sort) > build_out/op_kernel.txt
cp op_kernel/CMakeLists.txt build_out/kernel_cmake.txt
mkdir -p build_out/autogen
srcs=$(find op_host -maxdepth 1 -type f \( -name '*.c' -o -name '*.C' -o -name '*.c++' -o -name '*.cc' \
       -o -name '*.cpp' -o -name '*.cxx' -o -name '*.CPP' \) | sort)
printf '%s\n' $srcs > build_out/opbuild_sources.txt
if ! g++ -g -fPIC -shared -std=c++14 $srcs -D_GLIBCXX_USE_CXX11_ABI=0 -fvisibility=hidden \
     -I "$cann/include" -I "$cann/include/external" -I "$cann/include/experiment" \
     -I "$cann/include/experiment/platform" -I "$cann/include/experiment/metadef" \
     -I "$cann/include/experiment/runtime" -I "$cann/include/experiment/msprof" -I "$script_path/op_kernel" \
     -o build_out/autogen/libascend_all_ops.so; then
  echo "CMake Error: opbuild run failed!"
  exit 1
fi
ops=$(cat $srcs | tr -d '\r' | sed -n 's/.*OP_ADD *( *\([A-Za-z0-9_]*\).*/\1/p' | sort -u)
unit=$(printf '%s\n' $opts | sed -n 's/^-DASCEND_COMPUTE_UNIT=//p')
"$pyexe" "$cann/tools/fake_compile_kernel.py" "$script_path/op_kernel" "$script_path/op_host" "$unit" $ops || exit 1
cat > build_out/custom_opp_ubuntu_x86_64.run <<EOR
#!/bin/bash
set -e
for a in "\$@"; do case "\$a" in --install-path=*) dest="\${a#--install-path=}" ;; esac; done
mkdir -p "\$dest/vendors/customize/op_api/lib" "\$dest/vendors/customize/op_api/include" "\$dest/vendors/customize/op_impl"
cp "$cann/python/site-packages/opapi/libcust_opapi.so" "\$dest/vendors/customize/op_api/lib/"
cp "$cann/python/site-packages/opapi/aclnn_add_custom.h" "\$dest/vendors/customize/op_api/include/"
echo "\$@" > "\$dest/installer_args.txt"
EOR
