# The hardening a Debian maintainer expects of a program that listens on the
# network (dpkg-buildflags' defaults, which a plain `cmake` build does not
# get): stack protector, _FORTIFY_SOURCE, a position-independent executable
# and a read-only GOT bound at start (RELRO + BIND_NOW). Not with the
# sanitizers or the fuzzers, whose interceptors _FORTIFY_SOURCE bypasses.
# _FORTIFY_SOURCE needs optimisation (glibc warns at -O0, an error with
# DTRUN_WERROR), so Debug builds go without it; -U first, so a
# -D_FORTIFY_SOURCE from the user's flags is replaced, not redefined.
include(CheckPIESupported)
check_pie_supported()
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
add_compile_options(-fstack-protector-strong
                    "$<$<NOT:$<CONFIG:Debug>>:-U_FORTIFY_SOURCE;-D_FORTIFY_SOURCE=2>")
add_link_options(-Wl,-z,relro -Wl,-z,now)
