# Writes a C++ source defining `hyperslice::tpu::internal::<SYMBOL>` as the text of a file, so a
# script stays a real file (shellcheck, tests source it) and the binary carries it.
# Usage: cmake -DIN=<file> -DOUT=<file.cc> -DSYMBOL=<name> -P embed_script.cmake
file(READ ${IN} content)
string(FIND "${content}" ")hs_embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )hs_embedded\"")
endif()
file(WRITE ${OUT}.tmp
     "// Generated from ${IN} by embed_script.cmake. Do not edit.\n"
     "namespace hyperslice::tpu::internal {\n"
     "extern const char ${SYMBOL}[];\n"
     "const char ${SYMBOL}[] = R\"hs_embedded(${content})hs_embedded\";\n"
     "}  // namespace hyperslice::tpu::internal\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
