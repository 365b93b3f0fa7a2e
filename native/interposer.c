/* The hand-written part of rcuda's interposer library.
 *
 * Everything here runs inside the unmodified CUDA application.  It is kept
 * small: the launch-configuration stack (called on every <<<>>> launch, so it
 * stays in C), starting the embedded Python client exactly once and aborting
 * loudly if that fails, and the process lifecycle (flush at exit, fork).
 * Every other runtime function is generated (generated/cudart_exports.c) and
 * hands its arguments to Python.
 *
 * This file is #included into the cffi-generated module (see build.py), after
 * Python.h and the generated CUDA types.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RCUDA_EXPORT __attribute__((visibility("default")))
#define RCUDA_READY_TOKEN 0x72637564 /* "rcud": what a successful start returns */

/* Python entry points that are not CUDA functions (declared in build.py). */
static int rcuda_py_start(void);
static void rcuda_py_atexit(void);
static void rcuda_py_after_fork_child(void);

/* ------------------------------------------------------------ start-up */

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static int python_started = 0; /* set once the client has started (atomically) */
/* The program is itself a Python program: its interpreter hosts the client,
 * and finalizes before the C library's exit handlers run. */
static int python_host = 0;

/* The interpreter to start: the one of the environment rcuda is installed
 * in, found from where this library is, since no build path is compiled in
 * (see native/build.py).  In order:
 *   RCUDA_PYTHON                         when set: that one, nothing else
 *   _lib/interpreter                     a checkout's build (editable install)
 *                                        names the interpreter it was built for
 *   PREFIX/bin/python3.X                 installed as PREFIX/lib/python3.X/
 *                                        site-packages/rcuda/_lib (a venv, conda,
 *                                        a Python's own prefix)
 *   LIBDIR/../bin/python3.X              the Python whose libpython is loaded
 *   python3.X on PATH                    (--user installs and distributions' Pythons)
 * python3.X is the version this library embeds.  The INIT_CODE of
 * native/build.py then adds the folder holding the rcuda package to sys.path
 * if the interpreter's own site did not. */
#include <limits.h>
#include <sys/stat.h>

#define RCUDA_PYTHON_NAME "python" Py_STRINGIFY(PY_MAJOR_VERSION) "." Py_STRINGIFY(PY_MINOR_VERSION)
#define RCUDA_INTERPRETER_FILE "interpreter" /* INTERPRETER_FILE in native/build.py */

struct interpreter_search {
    char found[PATH_MAX];
    char tried[4096]; /* for the message when none is found */
};

/* `path` less its last component, in place; 0 when it has none left. */
static int strip_last_name(char *path)
{
    char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path)
        return 0;
    *slash = '\0';
    return 1;
}

static const char *last_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static const char *rcuda_library_path(void);

static int is_executable_file(const char *path)
{
    struct stat st;
    return path[0] == '/' && stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static void note_tried(struct interpreter_search *search, const char *what)
{
    size_t used = strlen(search->tried);
    snprintf(search->tried + used, sizeof search->tried - used, "%s%s", used ? ", " : "", what);
}

/* 1 (and `path` in search->found) when `path` is an executable file;
 * otherwise it joins the list of places tried. */
static int try_interpreter(struct interpreter_search *search, const char *path)
{
    if (is_executable_file(path) && strlen(path) < sizeof search->found) {
        strcpy(search->found, path);
        return 1;
    }
    note_tried(search, path);
    return 0;
}

/* The folder of rcuda's libraries (rcuda/_lib), resolved; 0 if unknown.
 * This code is always librcuda.so's: the drop-ins in rcuda/_lib/cudart are
 * filters of it (native/build.py). */
static int library_folder(char *folder)
{
    return realpath(rcuda_library_path(), folder) != NULL && strip_last_name(folder);
}

static int find_interpreter(struct interpreter_search *search)
{
    char folder[PATH_MAX], path[PATH_MAX + 64];
    const char *given = getenv("RCUDA_PYTHON");
    if (given && given[0])
        return try_interpreter(search, given);

    if (library_folder(folder)) {
        snprintf(path, sizeof path, "%s/" RCUDA_INTERPRETER_FILE, folder);
        FILE *file = fopen(path, "r");
        if (file) {
            char line[PATH_MAX];
            int found = fgets(line, sizeof line, file) != NULL;
            fclose(file);
            if (found) {
                line[strcspn(line, "\r\n")] = '\0';
                if (try_interpreter(search, line))
                    return 1;
            }
        }
        /* .../PREFIX/lib/python3.X/site-packages/rcuda/_lib */
        if (strip_last_name(folder) /* rcuda */
            && strip_last_name(folder) /* site-packages */
            && (strcmp(last_name(folder), "site-packages") == 0 || strcmp(last_name(folder), "dist-packages") == 0)
            && strip_last_name(folder) /* python3.X */
            && strcmp(last_name(folder), RCUDA_PYTHON_NAME) == 0
            && strip_last_name(folder) /* lib */
            && strip_last_name(folder) /* PREFIX */) {
            snprintf(path, sizeof path, "%s/bin/" RCUDA_PYTHON_NAME, folder);
            if (try_interpreter(search, path))
                return 1;
        }
    }

    Dl_info info;
    if (dladdr((void *)&Py_InitializeFromConfig, &info) && info.dli_fname && realpath(info.dli_fname, folder)
        && strip_last_name(folder) && strip_last_name(folder)) {
        snprintf(path, sizeof path, "%s/bin/" RCUDA_PYTHON_NAME, folder);
        if (try_interpreter(search, path))
            return 1;
    }

    const char *variable = getenv("PATH");
    char *paths = strdup(variable ? variable : "");
    int found = 0;
    for (char *saved = NULL, *dir = paths ? strtok_r(paths, ":", &saved) : NULL; dir && !found;
         dir = strtok_r(NULL, ":", &saved)) {
        snprintf(path, sizeof path, "%s/" RCUDA_PYTHON_NAME, dir);
        found = is_executable_file(path) && strlen(path) < sizeof search->found;
        if (found)
            strcpy(search->found, path);
    }
    free(paths);
    if (!found)
        note_tried(search, RCUDA_PYTHON_NAME " on PATH");
    return found;
}

/* Start the interpreter ourselves, before cffi would, so that it is the
 * Python rcuda was installed in: `executable` set to that Python (a venv's
 * bin/python) gives the venv's sys.path and site-packages, whatever python3
 * comes first on the program's PATH.  No signal handlers: SIGINT belongs to
 * the program.  A program that already runs Python keeps its interpreter. */
static void initialize_python(void)
{
    if (Py_IsInitialized())
        return;
    struct interpreter_search search;
    search.found[0] = search.tried[0] = '\0';
    if (!find_interpreter(&search)) {
        const char *given = getenv("RCUDA_PYTHON");
        if (given && given[0])
            fprintf(stderr, "rcuda: fatal: RCUDA_PYTHON=%s is not an executable file\n", given);
        else
            fprintf(stderr, "rcuda: fatal: cannot find the Python %d.%d that rcuda (%s) is installed in; "
                            "looked for %s.\nrcuda: set RCUDA_PYTHON to that interpreter "
                            "(e.g. /path/to/venv/bin/" RCUDA_PYTHON_NAME ").\n",
                    PY_MAJOR_VERSION, PY_MINOR_VERSION, rcuda_library_path(), search.tried);
        fflush(stderr);
        abort();
    }
    const char *executable = search.found;
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetBytesString(&config, &config.executable, executable);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        fprintf(stderr, "rcuda: fatal: cannot start the embedded Python (%s): %s\n",
                executable, status.err_msg ? status.err_msg : "unknown error");
        fflush(stderr);
        abort();
    }
    PyEval_SaveThread(); /* release the GIL, as cffi expects */
}

static void replay_registrations(void);       /* native/registrations.c */
static void registrations_before_fork(void);
static void registrations_after_fork(void);

/* In a Python program (the host already runs an interpreter), cffi's start
 * takes a spin lock it keeps in a field of PyCapsule_Type that it expects to
 * be 0 (tp_version_tag before Python 3.12).  The interpreter sets that field
 * whenever it caches an attribute lookup on a capsule, which imports such as
 * PyTorch's do: cffi would then spin for ever.  PyType_Modified resets it
 * (it only empties the type's lookup cache); holding the GIL from then until
 * cffi has taken its lock keeps any other thread from setting it again. */
static int start_in_python_host(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
#if PY_VERSION_HEX < 0x030C0000
    PyType_Modified(&PyCapsule_Type);
#endif
    int token = rcuda_py_start();
    PyGILState_Release(gil);
    return token;
}

static void start_python_client(void)
{
    python_host = Py_IsInitialized();
    initialize_python();
    /* cffi starts the interpreter on the first call into Python.  If that
     * fails, cffi returns 0 from every entry point, and 0 is cudaSuccess: a
     * program would run on with garbage.  So we insist on a token. */
    int token = python_host ? start_in_python_host() : rcuda_py_start();
    if (token != RCUDA_READY_TOKEN) {
        fprintf(stderr,
                "rcuda: fatal: the embedded Python client did not start (see the "
                "messages above).\nrcuda: refusing to run CUDA calls without it; "
                "check that rcuda is installed in the Python that built this "
                "library, or set RCUDA_PYTHONPATH.\n");
        fflush(stderr);
        abort();
    }
    replay_registrations(); /* the modules the program registered before this first call */
    __atomic_store_n(&python_started, 1, __ATOMIC_RELEASE);
}

/* In a Python program a thread may call CUDA holding the GIL (a C extension)
 * while another thread starts the client, which needs the GIL: it waits for
 * the start without it. */
static void start_or_wait(void)
{
    PyThreadState *saved = NULL;
    if (Py_IsInitialized() && PyGILState_Check())
        saved = PyEval_SaveThread();
    pthread_once(&start_once, start_python_client);
    if (saved)
        PyEval_RestoreThread(saved);
}

static inline void rcuda_ensure_started(void)
{
    if (!__atomic_load_n(&python_started, __ATOMIC_ACQUIRE))
        start_or_wait();
}

/* Set once the client has closed, at the program's exit: a CUDA call made
 * later (a library's destructor freeing its memory, say) gets CUDA's
 * "shutting down" status rather than reaching a client that is gone, or,
 * in a Python program, an interpreter that is finalized. */
static int client_closed = 0;

static void rcuda_close_client(void)
{
    __atomic_store_n(&client_closed, 1, __ATOMIC_RELEASE);
}

/* What every export that may call Python does first: 1 when it may. */
static inline int rcuda_enter(void)
{
    rcuda_ensure_started();
    return !__atomic_load_n(&client_closed, __ATOMIC_ACQUIRE);
}

/* Where this library lives, so the Python side can find its package. */
static const char *rcuda_library_path(void)
{
    Dl_info info;
    if (dladdr((void *)&rcuda_library_path, &info) && info.dli_fname)
        return info.dli_fname;
    return "";
}

/* Device-side output (printf in kernels) goes through the program's own
 * stdio buffer, so it stays in order with the program's printf. */
static void rcuda_write_stdout(const char *data, size_t size)
{
    fwrite(data, 1, size, stdout);
}

/* ------------------------------------------------------------ launch stack */

/* <<<grid, block, shmem, stream>>> pushes a configuration; the kernel's
 * host stub pops it right away.  Pushes can nest when a kernel argument's
 * evaluation itself launches a kernel, hence a small per-thread stack. */
#define CALL_CONFIG_DEPTH 32

struct call_config {
    dim3 grid, block;
    size_t shared_mem;
    void *stream;
};

static __thread struct call_config call_stack[CALL_CONFIG_DEPTH];
static __thread int call_depth = 0;

RCUDA_EXPORT unsigned int __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                      struct CUstream_st *stream)
{
    if (call_depth >= CALL_CONFIG_DEPTH)
        return 1; /* the stub then skips the launch, as CUDA does on failure */
    struct call_config *c = &call_stack[call_depth++];
    c->grid = gridDim;
    c->block = blockDim;
    c->shared_mem = sharedMem;
    c->stream = stream;
    return 0;
}

RCUDA_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                    void *stream)
{
    if (call_depth <= 0)
        return cudaErrorMissingConfiguration;
    struct call_config *c = &call_stack[--call_depth];
    *gridDim = c->grid;
    *blockDim = c->block;
    *sharedMem = c->shared_mem;
    *(void **)stream = c->stream;
    return cudaSuccess;
}

/* A kernel's handle is its host stub's address: the client registered it
 * under that address in __cudaRegisterFunction. */
RCUDA_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (kernel == NULL)
        return cudaErrorInvalidValue;
    *kernel = (cudaKernel_t)hostFun;
    return cudaSuccess;
}

/* ------------------------------------------------------------ lifecycle */

/* atexit handlers run in reverse order of registration, and this library's
 * constructor runs before the program's, so this runs after the program's
 * own teardown (__cudaUnregisterFatBinary): the last chance to send queued
 * asynchronous work.  Inert in processes that never made a CUDA call. */
static void flush_at_exit(void)
{
    /* A Python program's interpreter is finalized by now: the client did
     * this in the interpreter's own exit (client/entrypoints.py). */
    if (python_started && Py_IsInitialized() && !__atomic_load_n(&client_closed, __ATOMIC_ACQUIRE))
        rcuda_py_atexit();
    rcuda_close_client();
}

static int rcuda_python_host(void)
{
    return python_host;
}

/* fork(): hold the GIL across it so the child does not inherit it locked by
 * a thread that does not exist there, then give the child a fresh client
 * (the parent's sockets and threads are not the child's). */
static PyGILState_STATE fork_gil_state;

/* A Python program's own os.fork() does this for its interpreter, and the
 * client resets itself from there (os.register_at_fork, client/
 * entrypoints.py); a fork from its C code (subprocess) runs no Python in the
 * child before exec.  So in a Python program only C's state is reset here. */
static void before_fork(void)
{
    mirror_before_fork(); /* managed memory the host has not touched since a synchronisation: the child's copy */
    registrations_before_fork();
    if (!python_started || python_host)
        return;
    fork_gil_state = PyGILState_Ensure();
    PyOS_BeforeFork();
}

static void after_fork_parent(void)
{
    if (python_started && !python_host) {
        PyOS_AfterFork_Parent();
        PyGILState_Release(fork_gil_state);
    }
    registrations_after_fork();
}

static void fast_path_after_fork(void);   /* native/launch_fast_path.c */
static void last_error_after_fork(void);  /* native/last_error.c */
static void link_after_fork(void);        /* native/link.c */
static void allocation_table_after_fork(void); /* native/allocation_table.c */
static void async_path_after_fork(void);  /* native/async_fast_path.c */
/* mirror_before_fork, mirror_after_fork: native/mapped_memory.h */

static void after_fork_child(void)
{
    mirror_after_fork(); /* first: the parent's mapped memory becomes plain writable memory */
    fast_path_after_fork();
    async_path_after_fork();
    link_after_fork();
    allocation_table_after_fork();
    last_error_after_fork();
    registrations_after_fork();
    if (!python_started || python_host)
        return;
    PyOS_AfterFork_Child();
    PyGILState_Release(fork_gil_state);
    rcuda_py_after_fork_child();
}

__attribute__((constructor)) static void rcuda_library_loaded(void)
{
    atexit(flush_at_exit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
