# cpack pre-build script: the archive's README.md at its top level (a copy of share/doc/edgenlp/README.md).
file(GLOB _edgenlp_stage_dirs LIST_DIRECTORIES true "${CPACK_TEMPORARY_INSTALL_DIRECTORY}"
     "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/${CPACK_PACKAGE_FILE_NAME}")
foreach(_dir IN LISTS _edgenlp_stage_dirs)
  if(EXISTS "${_dir}/${CPACK_EDGENLP_DOCDIR}/README.md")
    file(COPY_FILE "${_dir}/${CPACK_EDGENLP_DOCDIR}/README.md" "${_dir}/README.md")
  endif()
endforeach()
