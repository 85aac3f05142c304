# cmake -DDIR=<folder> -DEXCLUDE=<regex> -DFORBIDDEN=<regex> -P check_includes.cmake
# Fails when a file of DIR (but those matching EXCLUDE) includes a header matching FORBIDDEN: the test form of the
# configure-time check in dependency_check.cmake, so an include added after configuring is caught by ctest.
file(GLOB files ${DIR}/*.hpp ${DIR}/*.cpp)
list(FILTER files EXCLUDE REGEX "${EXCLUDE}")
foreach(file ${files})
  file(STRINGS ${file} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](${FORBIDDEN})")
  if(hits)
    message(FATAL_ERROR "${file} must stay free of ${FORBIDDEN}, but has: ${hits}")
  endif()
endforeach()
list(LENGTH files n)
message(STATUS "${n} files of ${DIR} free of ${FORBIDDEN}")
