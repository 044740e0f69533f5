// Carries the shared precompiled torch header (see CMakeLists.txt); intentionally empty.
