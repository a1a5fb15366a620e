# What `cmake --install` puts where, and how CPack makes the .deb and the
# tarball from it (scripts/package drives both, and the wheel; see
# docs/packaging.md). Paths are relative to the prefix, so the same rules
# give /usr/bin/dtrun in the .deb, <venv>/bin/dtrun through the wheel and
# bin/dtrun in the tarball.
#
# The man pages (help2man) and the bash/zsh completions
# (packaging/completions.py) are made from the binaries' own --help at
# build time, so they always list the flags the binaries have.

include(GNUInstallDirs)

install(TARGETS dtrun dtrun-store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB dtrun_doc_pages CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${dtrun_doc_pages} DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The workers' `import dtrun` (progress to the agent): embedded in the
# binary for the workers dtrun starts; installed as a file for the wheel,
# which makes it a Python module (packaging/wheel/setup.py).
install(FILES ${PROJECT_SOURCE_DIR}/agent/python/dtrun.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/dtrun/python)

find_program(DTRUN_HELP2MAN help2man)
find_package(Python3 COMPONENTS Interpreter)
set(generated ${PROJECT_BINARY_DIR}/packaging)
set(generated_files "")
foreach(tool dtrun dtrun-store)
  if(DTRUN_HELP2MAN)
    # --version-string: the man page carries the release, not the commit.
    # gzip -n: compressed as Debian policy wants, without a time stamp.
    # help2man runs the program through the shell unquoted, so it gets
    # ./<tool> from the binary's folder: a build path with a space works.
    add_custom_command(OUTPUT ${generated}/man/${tool}.1.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${generated}/man
      COMMAND ${DTRUN_HELP2MAN} --no-info
              --version-string=${PROJECT_VERSION}
              --include=${PROJECT_SOURCE_DIR}/packaging/man/${tool}.h2m
              --output=${generated}/man/${tool}.1 ./$<TARGET_FILE_NAME:${tool}>
      COMMAND gzip -9 -n -f ${generated}/man/${tool}.1
      WORKING_DIRECTORY $<TARGET_FILE_DIR:${tool}>
      DEPENDS ${tool} ${PROJECT_SOURCE_DIR}/packaging/man/${tool}.h2m
      COMMENT "Writing the man page ${tool}(1)"
      VERBATIM)
    list(APPEND generated_files ${generated}/man/${tool}.1.gz)
    install(FILES ${generated}/man/${tool}.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endif()
  if(Python3_Interpreter_FOUND)
    add_custom_command(OUTPUT ${generated}/bash/${tool} ${generated}/zsh/_${tool}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${generated}/bash ${generated}/zsh
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/packaging/completions.py
              --binary $<TARGET_FILE:${tool}> --shell bash --version ${PROJECT_VERSION}
              --out ${generated}/bash/${tool}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/packaging/completions.py
              --binary $<TARGET_FILE:${tool}> --shell zsh --version ${PROJECT_VERSION}
              --out ${generated}/zsh/_${tool}
      DEPENDS ${tool} ${PROJECT_SOURCE_DIR}/packaging/completions.py
              ${PROJECT_SOURCE_DIR}/packaging/cli_help.py
      COMMENT "Writing the bash and zsh completions of ${tool}"
      VERBATIM)
    list(APPEND generated_files ${generated}/bash/${tool} ${generated}/zsh/_${tool})
    install(FILES ${generated}/bash/${tool}
            DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
    install(FILES ${generated}/zsh/_${tool}
            DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
  endif()
endforeach()
if(NOT DTRUN_HELP2MAN)
  message(WARNING "help2man not found: no man pages (scripts/setup-deps installs it)")
endif()
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "python3 not found: no shell completions")
endif()
add_custom_target(dtrun_packaging_files ALL DEPENDS ${generated_files})
# The one version every artifact carries (scripts/package reads it).
file(CONFIGURE OUTPUT ${generated}/version CONTENT "${PROJECT_VERSION}\n")

# CPack: `cpack -G DEB` (dtrun_<version>-1_<arch>.deb) and `cpack -G TGZ`
# (dtrun-<version>-linux-<arch>.tar.gz); scripts/package runs both.
set(DTRUN_MAINTAINER "dtrun maintainers <maintainers@users.noreply.a-seed-a19eed97.example>"
    CACHE STRING "The packages' Maintainer")
set(DTRUN_HOMEPAGE "" CACHE STRING "The packages' Homepage (none yet)")
set(CPACK_PACKAGE_NAME dtrun)
set(CPACK_PACKAGE_VENDOR "dtrun maintainers")
set(CPACK_PACKAGE_CONTACT "${DTRUN_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "fast, torchrun-compatible launcher for distributed PyTorch")
set(CPACK_PACKAGE_DESCRIPTION
    "dtrun is a drop-in replacement for torchrun written in C++: a per-node agent\n\
spawns the workers of a distributed PyTorch job with torchrun's environment,\n\
coordinates with the other nodes through a TCPStore-compatible key-value\n\
store, supervises the workers on one event loop and restarts the whole group\n\
on failure, without importing torch and without leaving processes behind.\n\
It takes torchrun's flags in both spellings and fills them in from Slurm and\n\
Kubernetes PyTorchJob. dtrun-store serves and queries such a store.")
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_FILE_NAME "dtrun-${PROJECT_VERSION}-linux-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_GENERATOR "DEB;TGZ")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# eu-stack gives the native stacks of --hang-timeout and `dtrun stacks`;
# without it those have Python stacks only.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "elfutils")
if(DTRUN_HOMEPAGE)
  set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${DTRUN_HOMEPAGE}")
endif()
# Debian policy: files 0644, directories 0755 whatever the umask was.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

include(CPack)
