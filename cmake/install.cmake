# SPDX-License-Identifier: MIT
# install.cmake — what `make install` / `cmake --install build` puts where,
# besides the programs (mt_program in ../CMakeLists.txt installs those to bin/).
# Included once from the top-level CMakeLists.txt. Layout under the prefix:
#   bin/meshtrain, bin/meshtrain-coordinator, bin/meshtrain-worker
#   share/man/man1/<program>.1          man pages made by help2man from --help
#                                       (plain-text <program>.txt in the doc
#                                       folder instead when help2man is absent)
#   share/doc/meshtrain/                README.md and docs/*.md
#   share/meshtrain/examples/           example job specs (examples/*.json)
#   share/meshtrain/deploy/             meshtrain.env, the Docker, Kubernetes, Grafana
#                                       and Slurm files, as templates
#   lib/systemd/system/*.service        units whose ExecStart points at this
#                                       prefix's bin/ (rewritten at install time)
# Checked by tests/integration/test_install.sh.
include(GNUInstallDirs)

set(MT_PROGRAMS meshtrain meshtrain-coordinator meshtrain-worker)
set(MT_NAME_meshtrain "command-line client of the meshtrain distributed training service")
set(MT_NAME_meshtrain-coordinator "meshtrain coordinator daemon for workers, jobs and state")
set(MT_NAME_meshtrain-worker "meshtrain worker daemon that runs training shards")
set(MT_HELP_DIR ${CMAKE_BINARY_DIR}/help)
find_program(HELP2MAN help2man)
set(MT_HELP_OUTPUTS)
foreach(p ${MT_PROGRAMS})
    if(HELP2MAN)
        set(out ${MT_HELP_DIR}/${p}.1)
        add_custom_command(OUTPUT ${out}
            COMMAND ${CMAKE_COMMAND} -E make_directory ${MT_HELP_DIR}
            COMMAND ${HELP2MAN} --no-info --section=1 --source=meshtrain
                    "--name=${MT_NAME_${p}}"
                    --version-string=${PROJECT_VERSION} --output=${out} $<TARGET_FILE:${p}>
            VERBATIM
            DEPENDS ${p}
            COMMENT "help2man ${p}.1")
        install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
    else()
        set(out ${MT_HELP_DIR}/${p}.txt)
        add_custom_command(OUTPUT ${out}
            COMMAND ${CMAKE_COMMAND} -E make_directory ${MT_HELP_DIR}
            COMMAND $<TARGET_FILE:${p}> --help > ${out}
            DEPENDS ${p}
            COMMENT "${p} --help > ${p}.txt")
        install(FILES ${out} DESTINATION ${CMAKE_INSTALL_DOCDIR})
    endif()
    list(APPEND MT_HELP_OUTPUTS ${out})
endforeach()
add_custom_target(mt_help ALL DEPENDS ${MT_HELP_OUTPUTS})

install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtrain/examples
        FILES_MATCHING PATTERN "*.json")
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/meshtrain.env
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtrain/deploy/systemd)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/docker ${CMAKE_SOURCE_DIR}/deploy/k8s
                  ${CMAKE_SOURCE_DIR}/deploy/slurm ${CMAKE_SOURCE_DIR}/deploy/grafana
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtrain/deploy)

# systemd units: the source files name /usr/local/bin; the installed copies
# name the bin/ of the prefix actually installed to (cmake --install --prefix).
foreach(u meshtrain-coordinator meshtrain-worker)
    install(CODE "
        file(READ \"${CMAKE_SOURCE_DIR}/deploy/systemd/${u}.service\" unit)
        string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\" unit \"\${unit}\")
        set(dst \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
        file(MAKE_DIRECTORY \"\${dst}\")
        message(STATUS \"Installing: \${dst}/${u}.service\")
        file(WRITE \"\${dst}/${u}.service\" \"\${unit}\")
    ")
endforeach()
