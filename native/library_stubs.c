/* The exports of cuBLAS, cuBLASLt, cuFFT and cuRAND that rcuda does not serve
 * (generated/libraries_exports.c: the legacy cuBLAS API, names no header
 * declares) report themselves once, by name, through Python's log. */

static void rcuda_py_library_unsupported(const char *name);

static void rcuda_library_unsupported(const char *name)
{
    if (rcuda_enter())
        rcuda_py_library_unsupported(name);
}
