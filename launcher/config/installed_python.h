// The Python of the environment dtrun is installed in. torchrun starts its
// workers with sys.executable: the interpreter of the virtual environment
// (or conda environment) it was installed into, whether or not that
// environment is activated. dtrun installed by `pip install` into such an
// environment finds that interpreter beside itself.
#pragma once

#include <filesystem>
#include <string>

namespace dtrun::launcher {

// `<dir>/python3` (else `<dir>/python`) when `executable` lies in `<dir>`
// = `<env>/bin` of a Python environment (`<env>/pyvenv.cfg`: venv and
// virtualenv; `<env>/conda-meta`: conda) and that interpreter is an
// executable file; "" otherwise (e.g. /usr/bin/dtrun from the .deb, which
// keeps using python3 from PATH).
std::string python_beside(const std::filesystem::path& executable);

// python_beside() of this process's own executable (/proc/self/exe).
std::string python_beside_this_program();

}  // namespace dtrun::launcher
