/* Module registration, kept in C until the first real CUDA call.
 *
 * nvcc's constructors register every fatbinary, kernel and __device__
 * variable before main, in every run, also in one that never calls CUDA
 * (`prog --help`).  Handing them to Python there would start the embedded
 * interpreter and import the client (about 100 ms) for nothing.  So they
 * are recorded here, and replayed into Python (client/runtime/core.py, the same
 * entry points as before) when the first real call starts it; after that
 * they go straight through.
 *
 * The handle a program gets is ours: one pointer-sized slot that holds the
 * Python client's handle once the fatbinary is registered there.  The
 * program only passes it back to us.  Everything recorded points into the
 * program's own static data (the fatbinary, kernel and variable names,
 * host stubs), which stays put until the module is unregistered.
 *
 * This file is #included into the cffi-generated module (see build.py),
 * after generated/cudart_exports.c.
 */

/* The Python entry points they go to (client/runtime/core.py) are declared in
 * generated/cudart_exports.c, included before this file. */

enum registration_kind { REGISTER_MODULE, REGISTER_FUNCTION, REGISTER_VARIABLE, REGISTER_MANAGED_VARIABLE };

struct registration {
    enum registration_kind kind;
    void **handle;           /* ours */
    void *fat_cubin;         /* module */
    const char *host_fun;    /* function */
    char *device_fun;
    const char *device_name; /* function, variable */
    int thread_limit;
    char *host_var;          /* variable; a managed one's: where its host address goes (void **) */
    char *device_address;
    int ext, constant, global;
    size_t size;
    struct registration *next;
};

/* Guards the queue and `registrations_live` (set once Python has the queue). */
static pthread_mutex_t registrations_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registration *queue_head = NULL, **queue_tail = &queue_head;
static int registrations_live = 0;

/* Hand one registration to the client.  A module's fills our handle's slot
 * with the client's handle, which its functions and variables then carry. */
static void forward(const struct registration *r)
{
    switch (r->kind) {
    case REGISTER_MODULE:
        *r->handle = rcuda_py___cudaRegisterFatBinary(r->fat_cubin);
        break;
    case REGISTER_FUNCTION:
        rcuda_py___cudaRegisterFunction((void **)*r->handle, r->host_fun, r->device_fun, r->device_name,
                                        r->thread_limit, NULL, NULL, NULL, NULL, NULL);
        break;
    case REGISTER_VARIABLE:
        rcuda_py___cudaRegisterVar((void **)*r->handle, r->host_var, r->device_address, r->device_name,
                                   r->ext, r->size, r->constant, r->global);
        break;
    case REGISTER_MANAGED_VARIABLE:
        rcuda_py___cudaRegisterManagedVar((void **)*r->handle, (void **)r->host_var, r->device_address,
                                          r->device_name, r->ext, r->size, r->constant, r->global);
        break;
    }
}

/* Forward now if Python runs, else queue.  A registration that arrives while
 * the queue is replayed waits for the lock, so order is kept. */
static void register_or_queue(const struct registration *r)
{
    pthread_mutex_lock(&registrations_lock);
    if (!registrations_live) {
        struct registration *copy = malloc(sizeof *copy);
        if (copy == NULL) {
            fprintf(stderr, "rcuda: fatal: out of memory recording a CUDA module registration\n");
            abort();
        }
        *copy = *r;
        copy->next = NULL;
        *queue_tail = copy;
        queue_tail = &copy->next;
        pthread_mutex_unlock(&registrations_lock);
        return;
    }
    pthread_mutex_unlock(&registrations_lock);
    forward(r);
}

/* Called once, right after the client started (interposer.c). */
static void replay_registrations(void)
{
    pthread_mutex_lock(&registrations_lock);
    struct registration *r = queue_head;
    while (r != NULL) {
        struct registration *next = r->next;
        forward(r);
        free(r);
        r = next;
    }
    queue_head = NULL;
    queue_tail = &queue_head;
    registrations_live = 1;
    pthread_mutex_unlock(&registrations_lock);
}

RCUDA_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    void **handle = calloc(1, sizeof(void *)); /* kept until exit, as the program may keep it */
    if (handle == NULL) {
        fprintf(stderr, "rcuda: fatal: out of memory registering a CUDA module\n");
        abort();
    }
    struct registration r = {.kind = REGISTER_MODULE, .handle = handle, .fat_cubin = fatCubin};
    register_or_queue(&r);
    return handle;
}

/* Nothing to do at the end of a module's registration (the client does
 * nothing there either). */
RCUDA_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

RCUDA_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                         const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                         dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize; /* always NULL from nvcc; unused by the client */
    struct registration r = {.kind = REGISTER_FUNCTION, .handle = fatCubinHandle, .host_fun = hostFun,
                             .device_fun = deviceFun, .device_name = deviceName, .thread_limit = thread_limit};
    register_or_queue(&r);
}

RCUDA_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                    const char *deviceName, int ext, size_t size, int constant, int global)
{
    struct registration r = {.kind = REGISTER_VARIABLE, .handle = fatCubinHandle, .host_var = hostVar,
                             .device_address = deviceAddress, .device_name = deviceName, .ext = ext,
                             .constant = constant, .global = global, .size = size};
    register_or_queue(&r);
}

/* A __managed__ variable: the program reads and writes it through the
 * pointer at hostVarPtrAddress, which __cudaInitModule sets. */
RCUDA_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                                           const char *deviceName, int ext, size_t size, int constant, int global)
{
    struct registration r = {.kind = REGISTER_MANAGED_VARIABLE, .handle = fatCubinHandle,
                             .host_var = (char *)hostVarPtrAddress, .device_address = deviceAddress,
                             .device_name = deviceName, .ext = ext, .constant = constant, .global = global,
                             .size = size};
    register_or_queue(&r);
}

/* The program's first touch of a module's __managed__ variables (nvcc's
 * __nv_init_managed_rt): a real CUDA call, so the client starts.  If they
 * cannot be set up, the program would go on through a NULL pointer: it is
 * stopped here instead, saying why (the client logged the cause). */
RCUDA_EXPORT char __cudaInitModule(void **fatCubinHandle)
{
    if (!rcuda_enter())
        return 0;
    char ready = rcuda_py___cudaInitModule((void **)*fatCubinHandle);
    if (!ready) {
        fprintf(stderr, "rcuda: fatal: the __managed__ variables of a CUDA module could not be set up "
                        "(the error is logged above)\n");
        abort();
    }
    return ready;
}

/* A module going away (at exit, or a library's dlclose): the client forgets
 * it; one never handed to the client is dropped from the queue. */
RCUDA_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    pthread_mutex_lock(&registrations_lock);
    if (!registrations_live) {
        struct registration **link = &queue_head;
        queue_tail = &queue_head;
        while (*link != NULL) {
            struct registration *r = *link;
            if (r->handle == fatCubinHandle) {
                *link = r->next;
                free(r);
            } else {
                queue_tail = &r->next;
                link = &r->next;
            }
        }
        pthread_mutex_unlock(&registrations_lock);
        return;
    }
    pthread_mutex_unlock(&registrations_lock);
    if (__atomic_load_n(&client_closed, __ATOMIC_ACQUIRE))
        return; /* the client, and all it knew, is gone */
    rcuda_py___cudaUnregisterFatBinary((void **)*fatCubinHandle);
}

/* fork(): the queue's lock is held across it (taken before the GIL, as the
 * replay takes them), so that a child never inherits it locked by a thread
 * that is not there.  A child that has not started the client keeps the
 * queue, and replays it at its own first call. */
static void registrations_before_fork(void)
{
    pthread_mutex_lock(&registrations_lock);
}

static void registrations_after_fork(void)
{
    pthread_mutex_unlock(&registrations_lock);
}
