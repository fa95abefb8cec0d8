# The installable SDK: `cmake --install <build> --prefix DIR` and `cpack` (build.sh --package).
#
#   DIR/include/edgenlp.h
#   DIR/lib/libedgenlp.so -> .so.MAJOR -> .so.VERSION   RUNPATH $ORIGIN
#   DIR/lib/libexecutorch*.so                          the wheel libraries it needs, RUNPATH $ORIGIN
#   DIR/lib/libedgenlp_jni.so                          Java binding (when built), RUNPATH $ORIGIN
#   DIR/lib/cmake/edgenlp/edgenlpConfig.cmake          find_package(edgenlp) -> edgenlp::edgenlp
#   DIR/lib/pkgconfig/edgenlp.pc                       pkg-config edgenlp
#   DIR/bin/edgenlp-run                                RUNPATH $ORIGIN/../lib
#   DIR/share/java/edgenlp-VERSION.jar                 Java binding (when built)
#   DIR/share/edgenlp/examples/                        classify.c + its CMakeLists.txt
#   DIR/share/doc/edgenlp/README.md                    (also at the top of the archive)
#
# Every path is relative to DIR: the tree can be moved or unpacked anywhere.
# Components: "runtime" (the libraries and edgenlp-run: what the Python wheel carries),
# "dev" (header, CMake and pkg-config files, example, README), "java".
include(CMakePackageConfigHelpers)

set(EDGENLP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/edgenlp")
set(EDGENLP_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH _edgenlp_bin_to_lib "/_/${CMAKE_INSTALL_BINDIR}" "/_/${CMAKE_INSTALL_LIBDIR}")

set_target_properties(edgenlp PROPERTIES INSTALL_RPATH "\$ORIGIN")
set_target_properties(edgenlp-run PROPERTIES INSTALL_RPATH "\$ORIGIN/${_edgenlp_bin_to_lib}")

install(TARGETS edgenlp EXPORT edgenlpTargets
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT runtime NAMELINK_COMPONENT dev
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(FILES include/edgenlp.h DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT dev)
install(TARGETS edgenlp-run RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT runtime)

# The ExecuTorch libraries from the wheel, with their RUNPATH (wheel-internal
# directories) replaced by $ORIGIN: they load each other from lib/.
install(PROGRAMS ${ET_LIBS} DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT runtime)
set(_edgenlp_et_names)
foreach(lib IN LISTS ET_LIBS)
  get_filename_component(_name "${lib}" NAME)
  list(APPEND _edgenlp_et_names "${_name}")
endforeach()
install(CODE "
  foreach(_lib IN ITEMS ${_edgenlp_et_names})
    file(RPATH_SET FILE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/\${_lib}\"
         NEW_RPATH \"\\\$ORIGIN\")
  endforeach()
" COMPONENT runtime)

if(EDGENLP_JAVA_BUILT)
  set_target_properties(edgenlp_jni PROPERTIES INSTALL_RPATH "\$ORIGIN")
  install(TARGETS edgenlp_jni LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT java)
  install_jar(edgenlp_java DESTINATION "${CMAKE_INSTALL_DATADIR}/java" COMPONENT java)
  install(FILES java/src/examples/java/Classify.java DESTINATION "${CMAKE_INSTALL_DATADIR}/edgenlp/examples/java"
          COMPONENT java)
endif()

# find_package(edgenlp CONFIG): the imported target edgenlp::edgenlp.
install(EXPORT edgenlpTargets NAMESPACE edgenlp:: DESTINATION "${EDGENLP_INSTALL_CMAKEDIR}" COMPONENT dev)
configure_package_config_file(cmake/edgenlpConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/edgenlpConfig.cmake"
                              INSTALL_DESTINATION "${EDGENLP_INSTALL_CMAKEDIR}")
# Within one major version the C API only grows (include/edgenlp.h, "Versions").
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/edgenlpConfigVersion.cmake"
                                 COMPATIBILITY SameMajorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/edgenlpConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/edgenlpConfigVersion.cmake"
        DESTINATION "${EDGENLP_INSTALL_CMAKEDIR}" COMPONENT dev)

# pkg-config: prefix found from the .pc file's own directory.
file(RELATIVE_PATH EDGENLP_PC_PREFIX "/_/${EDGENLP_INSTALL_PKGCONFIGDIR}" "/_")
string(REGEX REPLACE "/$" "" EDGENLP_PC_PREFIX "${EDGENLP_PC_PREFIX}")
configure_file(cmake/edgenlp.pc.in "${CMAKE_CURRENT_BINARY_DIR}/edgenlp.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/edgenlp.pc" DESTINATION "${EDGENLP_INSTALL_PKGCONFIGDIR}" COMPONENT dev)

install(FILES examples/classify.c examples/CMakeLists.txt DESTINATION "${CMAKE_INSTALL_DATADIR}/edgenlp/examples"
        COMPONENT dev)
install(FILES sdk/README.md DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/edgenlp" COMPONENT dev)

# cpack (build.sh --package): edgenlp-runtime-<version>-linux-<arch>.tar.gz, stripped.
set(CPACK_GENERATOR TGZ)
set(CPACK_PACKAGE_NAME edgenlp-runtime)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
string(TOLOWER "${CMAKE_SYSTEM_NAME}" _edgenlp_os)
set(CPACK_PACKAGE_FILE_NAME "edgenlp-runtime-${PROJECT_VERSION}-${_edgenlp_os}-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_STRIP_FILES ON)
set(CPACK_PRE_BUILD_SCRIPTS "${CMAKE_CURRENT_SOURCE_DIR}/cmake/package_readme.cmake")
set(CPACK_EDGENLP_DOCDIR "${CMAKE_INSTALL_DATADIR}/doc/edgenlp")
include(CPack)
