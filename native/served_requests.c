/* Small synchronous requests served by C on a GPU server: a copy of at
 * most 64 KiB to or from the host, cudaDeviceSynchronize,
 * cudaStreamSynchronize, cudaEventSynchronize and cudaMemGetInfo, read
 * from the lane, run through the driver and answered on the lane, with no
 * Python per request.
 *
 * Through Python each such request costs tens of microseconds on the
 * server (reading and decoding the message, CuPy's bindings, encoding and
 * sending the reply): more than the network's round trip.  Here it costs
 * the driver's calls and two system calls.
 *
 * The session's thread (server/device_service.py) calls
 * rcuda_executor_serve when the lane has bytes, the lane is not sealed,
 * and nothing Python must tell first is waiting (an asynchronous error, a
 * sticky one, device output).  C serves the messages that are whole and
 * its own, one after the other, and stops at the first that is not:
 * Python serves that one the ordinary way.  The bytes come from what
 * Python's lane read ahead (`left`) or, when that is empty, from the
 * socket with MSG_PEEK, so that a message C leaves stays in the stream
 * for Python.
 *
 * A request whose work is not done within the spin window (a copy behind
 * a long kernel) is not waited for: its *slot* (an event, and a pinned
 * buffer for a download) goes to Python, which answers when the event has
 * happened (server/backends/cuda_batches.py, ServedRequest), serving
 * other requests meanwhile.  So does a finished request when the device
 * printed something (Python's reply carries the output) and one the
 * driver refused (Python explains the error).
 *
 * Included into batch_executor.c: it uses the executor's tables (streams,
 * allocations) and its driver entry points.
 */
#include <errno.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

#include "msgpack_lite.c"

#define SERVED_COPY_MAX (64u << 10) /* larger copies go through Python's pinned staging, overlapped */
#define SERVED_SLOTS 8
#define SERVED_HEADER_MAX 256       /* a request C serves has a short header */
#define CU_EVENT_FLAGS 0x3          /* CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING */
#define CU_STREAM_NON_BLOCKING 0x1
#define CUDA_ERROR_NOT_READY 600

/* Which request a slot or a served message was (Python names them). */
enum served_op {
    SERVED_NONE = 0, SERVED_DTOH = 1, SERVED_HTOD = 2, SERVED_SYNC = 3, SERVED_STREAM_SYNC = 4, SERVED_EVENT_SYNC = 5,
    SERVED_MEM_INFO = 6
};

struct served_slot {
    CUevent event;  /* recorded where the request's work ends */
    void *buffer;   /* pinned, SERVED_COPY_MAX bytes: a download lands here */
    int busy;       /* Python holds it (a pending request) */
    CUresult status; /* a driver error when the work was issued, else 0 */
};

struct served_requests {
    int ready;                     /* the slots and the wait stream exist */
    CUstream wait_stream;          /* a device synchronisation's events meet here */
    CUevent scratch;               /* recorded on each stream in turn, waited for by wait_stream */
    struct served_slot slots[SERVED_SLOTS];
    uint8_t message[SERVED_HEADER_MAX + 16 + 8 + SERVED_COPY_MAX]; /* a peeked message: prefix, one length, header, payload */
};

/* What one call of rcuda_executor_serve did (server/backends/cuda_batches.py reads it). */
struct rcuda_serve_state {
    /* in */
    int32_t output_fd;       /* where the driver prints device output (-1: not captured) */
    uint64_t output_seen;    /* how much of it Python has taken */
    uint64_t spin_ns;        /* how long to poll a request's work before handing it to Python */
    uint64_t idle_spin_ns;   /* after answering, how long to wait awake for the next request */
    uint64_t memory_total;   /* what cudaMemGetInfo may report as total; a driver reporting more means a
                                --memory-limit applies, and Python answers (0: C never answers it) */
    /* out */
    uint64_t consumed;       /* bytes of `left` the served messages took */
    uint32_t served;         /* requests answered */
    uint32_t last_op;        /* enum served_op of the last request C took */
    uint64_t to_device, from_device; /* bytes copied */
    /* out, SERVE_PENDING: the request Python answers */
    uint64_t seq;
    uint32_t slot, op, size;
    int32_t status;
};

enum {
    SERVE_IDLE = 0,    /* no bytes to read */
    SERVE_PYTHON = 1,  /* the next message is Python's (not C's kind, or not all here yet) */
    SERVE_PENDING = 2, /* a request was taken; its slot `slot` is Python's to answer */
    SERVE_BROKEN = 3,  /* the lane broke answering (errno in `status`) */
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ------------------------------------------------------------ reading a request */

struct served_request {
    enum served_op op;
    uint64_t seq, address, size, stream, event;
    CUevent event_handle;   /* event_sync's event */
    const uint8_t *payload; /* an upload's bytes */
    size_t length;          /* the whole message's bytes */
};

/* The fields a request C serves may have, each at most once: exactly
 * its op's, all non-negative integers, or the request is Python's (which
 * also explains any malformed one). */
static int read_header(const uint8_t *header, size_t size, struct served_request *req)
{
    struct mp_reader r = {header, header + size, 1};
    int64_t fields = mp_map_size(&r);
    enum { HAS_SEQ = 1, HAS_SRC = 2, HAS_DST = 4, HAS_SIZE = 8, HAS_STREAM = 16, HAS_EVENT = 32 };
    unsigned has = 0;
    for (int64_t i = 0; i < fields && r.ok; i++) {
        size_t length = 0;
        const unsigned char *key = mp_key(&r, &length);
        if (!r.ok)
            return 0;
        if (mp_key_is(key, length, "op")) {
            if (r.at >= r.end || (*r.at & 0xe0) != 0xa0)
                return 0;
            size_t op_length = *r.at & 0x1f;
            const unsigned char *op = r.at + 1;
            mp_skip_bytes(&r, op_length + 1);
            if (!r.ok || req->op)
                return 0;
            if (mp_key_is(op, op_length, "dtoh"))
                req->op = SERVED_DTOH;
            else if (mp_key_is(op, op_length, "htod"))
                req->op = SERVED_HTOD;
            else if (mp_key_is(op, op_length, "sync"))
                req->op = SERVED_SYNC;
            else if (mp_key_is(op, op_length, "stream_sync"))
                req->op = SERVED_STREAM_SYNC;
            else if (mp_key_is(op, op_length, "event_sync"))
                req->op = SERVED_EVENT_SYNC;
            else if (mp_key_is(op, op_length, "mem_info"))
                req->op = SERVED_MEM_INFO;
            else
                return 0;
            continue;
        }
        enum mp_kind kind;
        int64_t value = mp_value(&r, &kind, 0);
        if (!r.ok || kind != MP_INT || value < 0)
            return 0;
        unsigned bit = mp_key_is(key, length, "seq")      ? HAS_SEQ
                       : mp_key_is(key, length, "src")    ? HAS_SRC
                       : mp_key_is(key, length, "dst")    ? HAS_DST
                       : mp_key_is(key, length, "size")   ? HAS_SIZE
                       : mp_key_is(key, length, "stream") ? HAS_STREAM
                       : mp_key_is(key, length, "event")  ? HAS_EVENT : 0;
        if (!bit || (has & bit))
            return 0;
        has |= bit;
        if (bit == HAS_SEQ)
            req->seq = (uint64_t)value;
        else if (bit == HAS_SRC || bit == HAS_DST)
            req->address = (uint64_t)value;
        else if (bit == HAS_SIZE)
            req->size = (uint64_t)value;
        else if (bit == HAS_STREAM)
            req->stream = (uint64_t)value;
        else
            req->event = (uint64_t)value;
    }
    if (fields < 0 || !r.ok || r.at != r.end)
        return 0;
    switch (req->op) {
    case SERVED_DTOH:
        return has == (HAS_SEQ | HAS_SRC | HAS_SIZE | HAS_STREAM);
    case SERVED_HTOD:
        return has == (HAS_SEQ | HAS_DST | HAS_SIZE | HAS_STREAM);
    case SERVED_SYNC:
    case SERVED_MEM_INFO:
        return has == HAS_SEQ;
    case SERVED_STREAM_SYNC:
        return has == (HAS_SEQ | HAS_STREAM);
    case SERVED_EVENT_SYNC:
        return has == (HAS_SEQ | HAS_EVENT);
    default:
        return 0;
    }
}

/* Whether `data` begins with a whole request C serves: 1 (and `req`),
 * 0 when the message is Python's or not all here. */
static int read_request(const uint8_t *data, size_t size, struct served_request *req)
{
    uint32_t header_size, frames;
    if (size < 8)
        return 0;
    memcpy(&header_size, data, 4);
    memcpy(&frames, data + 4, 4);
    if (header_size > SERVED_HEADER_MAX || frames > 1)
        return 0;
    uint64_t payload = 0;
    size_t at = 8;
    if (frames) {
        if (size < 16)
            return 0;
        memcpy(&payload, data + 8, 8);
        if (payload > SERVED_COPY_MAX)
            return 0;
        at = 16;
    }
    if (size - at < header_size + payload)
        return 0;
    memset(req, 0, sizeof *req);
    if (!read_header(data + at, header_size, req))
        return 0;
    if ((req->op == SERVED_HTOD) != (frames == 1) || (req->op == SERVED_HTOD && payload != req->size))
        return 0; /* Python says what is wrong with it */
    if ((req->op == SERVED_DTOH || req->op == SERVED_HTOD) && (!req->size || req->size > SERVED_COPY_MAX))
        return 0;
    req->payload = data + at + header_size;
    req->length = at + header_size + payload;
    return 1;
}

/* ------------------------------------------------------------ running it */

static struct served_slot *free_slot(struct served_requests *s)
{
    for (int i = 0; i < SERVED_SLOTS; i++)
        if (!s->slots[i].busy)
            return &s->slots[i];
    return NULL;
}

/* Whether C can run `req`: its stream (or event) is known, its memory the
 * session's.  The stream's table entry (the legacy stream's for requests
 * that name none: their `stream` is 0). */
static struct slot *served_stream(rcuda_executor *ex, struct served_request *req)
{
    struct slot *stream = table_find(&ex->streams, req->stream + 1);
    if (!stream)
        return NULL;
    if (req->op == SERVED_EVENT_SYNC) {
        struct slot *event = table_find(&ex->events, req->event + 1);
        if (!event)
            return NULL;
        req->event_handle = event->handle;
    }
    if ((req->op == SERVED_DTOH || req->op == SERVED_HTOD) && !ranges_hold(&ex->ranges, req->address, req->size))
        return NULL;
    return stream;
}

/* Issue the request's work and record the slot's event after it: the
 * driver's status. */
static CUresult issue(rcuda_executor *ex, const struct served_request *req, CUstream stream, struct served_slot *slot)
{
    const struct served_driver *cu = &ex->served_cu;
    struct served_requests *s = ex->served;
    CUresult status = 0;
    switch (req->op) {
    case SERVED_DTOH:
        status = cu->memcpy_dtoh_async(slot->buffer, req->address, req->size, stream);
        break;
    case SERVED_HTOD: /* from pageable memory: the driver stages it before returning */
        status = ex->cu.memcpy_htod_async(req->address, req->payload, req->size, stream);
        break;
    case SERVED_SYNC: /* every stream's work so far, met on the wait stream */
        for (size_t i = 0; i < ex->streams.capacity && !status; i++) {
            if (!ex->streams.slots[i].key)
                continue;
            status = ex->cu.event_record(s->scratch, ex->streams.slots[i].handle);
            if (!status)
                status = ex->cu.stream_wait_event(s->wait_stream, s->scratch, 0);
        }
        stream = s->wait_stream;
        break;
    case SERVED_EVENT_SYNC: /* after the program's event, on a stream of our own: the program may destroy it */
        status = ex->cu.stream_wait_event(s->wait_stream, req->event_handle, 0);
        stream = s->wait_stream;
        break;
    default:
        break;
    }
    return status ? status : ex->cu.event_record(slot->event, stream);
}

/* Whether the slot's work is done: 0, CUDA_ERROR_NOT_READY, or the error.
 * Done, it is synchronised with, which flushes the kernels' printf output. */
static CUresult slot_done(rcuda_executor *ex, const struct served_slot *slot)
{
    CUresult status = ex->served_cu.event_query(slot->event);
    return status ? status : ex->served_cu.event_synchronize(slot->event);
}

/* Poll the slot's event for up to `spin_ns`, giving up early when another
 * message arrives (Python serves it meanwhile): 0 when the work is done. */
static CUresult spin(rcuda_executor *ex, struct served_slot *slot, int fd, int more_read, uint64_t spin_ns)
{
    uint64_t deadline = now_ns() + spin_ns;
    for (;;) {
        CUresult status = slot_done(ex, slot);
        if (status != CUDA_ERROR_NOT_READY)
            return status;
        char byte;
        if (more_read || now_ns() > deadline || recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
            return CUDA_ERROR_NOT_READY;
    }
}

/* Whether the device printed something Python has not taken. */
static int output_waiting(const struct rcuda_serve_state *state)
{
    if (state->output_fd < 0)
        return 0;
    fflush(NULL); /* the driver's stdio buffer */
    struct stat st;
    return fstat(state->output_fd, &st) == 0 && (uint64_t)st.st_size > state->output_seen;
}

/* Answer {seq, err: 0} (and cudaMemGetInfo's free and total, when
 * `info`) with the download's bytes, if any: 0, or errno. */
static int answer(int fd, uint64_t seq, const void *data, uint32_t size, const size_t *info)
{
    uint8_t head[96];
    struct mp_writer w = {head + 8 + (size ? 8 : 0), head + sizeof head};
    uint8_t *header = w.at;
    mp_map(&w, info ? 4 : 2);
    mp_str(&w, "seq");
    mp_uint(&w, seq);
    mp_str(&w, "err");
    mp_uint(&w, 0);
    if (info) {
        mp_str(&w, "free");
        mp_uint(&w, info[0]);
        mp_str(&w, "total");
        mp_uint(&w, info[1]);
    }
    uint32_t header_size = (uint32_t)(w.at - header), frames = size ? 1 : 0;
    uint64_t length = size;
    memcpy(head, &header_size, 4);
    memcpy(head + 4, &frames, 4);
    if (size)
        memcpy(head + 8, &length, 8);
    struct iovec parts[2] = {{head, (size_t)(w.at - head)}, {(void *)data, size}};
    struct msghdr message = {.msg_iov = parts, .msg_iovlen = size ? 2 : 1};
    while (message.msg_iovlen) {
        ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR)
                continue;
            return errno ? errno : EIO;
        }
        while (message.msg_iovlen && (size_t)sent >= message.msg_iov->iov_len) {
            sent -= (ssize_t)message.msg_iov->iov_len;
            message.msg_iov++;
            message.msg_iovlen--;
        }
        if (message.msg_iovlen) {
            message.msg_iov->iov_base = (uint8_t *)message.msg_iov->iov_base + sent;
            message.msg_iov->iov_len -= (size_t)sent;
        }
    }
    return 0;
}

/* Take the peeked message's `length` bytes off the socket (into the
 * buffer they were peeked into): 0, or -1 when the lane broke. */
static int consume(int fd, struct served_requests *s, size_t length)
{
    size_t done = 0;
    while (done < length) {
        ssize_t got = recv(fd, s->message + done, length - done, MSG_DONTWAIT);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            return -1; /* peeked bytes are there, unless the lane is broken */
        }
        done += (size_t)got;
    }
    return 0;
}

/* Peek at what the socket holds, waiting awake up to `spin_ns` for bytes
 * when there are none: a program making synchronous calls makes the next
 * one soon, and a sleeping thread's wake-up costs more than the spin
 * (rcuda/lane.py, SpinPolicy).  The byte count; 0 at the end of the
 * stream or an error (Python's read says which); -1 when nothing came. */
static ssize_t peek(int fd, struct served_requests *s, uint64_t spin_ns)
{
    uint64_t deadline = spin_ns ? now_ns() + spin_ns : 0;
    for (;;) {
        ssize_t got = recv(fd, s->message, sizeof s->message, MSG_PEEK | MSG_DONTWAIT);
        if (got > 0)
            return got;
        if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 0;
        if (!deadline || now_ns() > deadline)
            return -1;
        sched_yield(); /* the client may share this CPU */
    }
}

/* ------------------------------------------------------------ the entry points */

/* Free the slots and the wait stream (the device's close, its context
 * current).  While a slot is Python's, a waiter thread may still wait on
 * it: then everything stays (rcuda_executor_close frees the memory). */
EXPORT void rcuda_executor_serve_stop(rcuda_executor *ex)
{
    struct served_requests *s = ex->served;
    if (!s)
        return;
    for (int i = 0; i < SERVED_SLOTS; i++)
        if (s->slots[i].busy)
            return;
    for (int i = 0; i < SERVED_SLOTS; i++) {
        if (s->slots[i].event)
            ex->served_cu.event_destroy(s->slots[i].event);
        if (s->slots[i].buffer)
            ex->served_cu.mem_free_host(s->slots[i].buffer);
    }
    if (s->scratch)
        ex->served_cu.event_destroy(s->scratch);
    if (s->wait_stream)
        ex->served_cu.stream_destroy(s->wait_stream);
    free(s);
    ex->served = NULL;
}

/* Make the slots and the wait stream, on the GPU thread with the context
 * current: 0, or the driver's status.  Pinned memory is allocated here,
 * once, because allocating it waits for the device. */
EXPORT int rcuda_executor_serve_start(rcuda_executor *ex)
{
    if (ex->served)
        return 0;
    struct served_requests *s = calloc(1, sizeof *s);
    if (!s)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    CUresult status = ex->served_cu.stream_create(&s->wait_stream, CU_STREAM_NON_BLOCKING);
    if (!status)
        status = ex->served_cu.event_create(&s->scratch, CU_EVENT_FLAGS);
    for (int i = 0; i < SERVED_SLOTS && !status; i++) {
        status = ex->served_cu.event_create(&s->slots[i].event, CU_EVENT_FLAGS);
        if (!status)
            status = ex->served_cu.mem_host_alloc(&s->slots[i].buffer, SERVED_COPY_MAX, 0);
    }
    ex->served = s;
    if (status)
        rcuda_executor_serve_stop(ex);
    return status;
}

/* Serve the lane's whole requests of C's kinds, from `left` (what Python
 * read ahead) or else the socket, until one is Python's or is pending. */
EXPORT int rcuda_executor_serve(rcuda_executor *ex, int fd, const uint8_t *left, size_t left_size,
                                struct rcuda_serve_state *state)
{
    struct served_requests *s = ex->served;
    state->consumed = 0;
    state->served = 0;
    state->last_op = SERVED_NONE;
    state->to_device = state->from_device = 0;
    if (!s)
        return SERVE_PYTHON;
    if (ex->cu.ctx_set_current(ex->context))
        return SERVE_PYTHON; /* Python's calls will say what is wrong */
    for (;;) {
        int from_left = state->consumed < left_size;
        const uint8_t *data = left + state->consumed;
        size_t size = left_size - state->consumed;
        if (!from_left) {
            ssize_t got = peek(fd, s, state->served ? state->idle_spin_ns : 0);
            if (got <= 0)
                return got < 0 ? SERVE_IDLE : SERVE_PYTHON;
            data = s->message;
            size = (size_t)got;
        }
        struct served_request req;
        if (!read_request(data, size, &req))
            return SERVE_PYTHON;
        int waits = req.op != SERVED_MEM_INFO; /* cudaMemGetInfo: no work to wait for, no slot */
        struct served_slot *slot = waits ? free_slot(s) : NULL;
        size_t info[2];
        CUresult status = 0;
        if (!waits) {
            if (ex->served_cu.mem_get_info(&info[0], &info[1]) || info[1] > state->memory_total)
                return SERVE_PYTHON; /* Python explains the error, or applies --memory-limit */
        } else {
            struct slot *stream = slot ? served_stream(ex, &req) : NULL;
            if (!stream)
                return SERVE_PYTHON; /* Python runs it, or refuses it with its message */
            status = issue(ex, &req, stream->handle, slot);
        }
        if (from_left) {
            state->consumed += req.length;
        } else if (consume(fd, s, req.length)) {
            state->status = EIO;
            return SERVE_BROKEN;
        }
        state->last_op = req.op;
        if (waits) {
            if (!status) {
                if (req.op == SERVED_HTOD)
                    state->to_device += req.size;
                else if (req.op == SERVED_DTOH)
                    state->from_device += req.size;
                status = spin(ex, slot, fd, state->consumed < left_size, state->spin_ns);
            }
            if (status || output_waiting(state)) {
                slot->busy = 1;
                slot->status = status == CUDA_ERROR_NOT_READY ? 0 : status;
                state->seq = req.seq;
                state->slot = (uint32_t)(slot - s->slots);
                state->op = req.op;
                state->size = req.op == SERVED_DTOH ? (uint32_t)req.size : 0;
                state->status = slot->status;
                return SERVE_PENDING;
            }
        }
        int download = req.op == SERVED_DTOH;
        int failed = answer(fd, req.seq, download ? slot->buffer : NULL, download ? (uint32_t)req.size : 0,
                            waits ? NULL : info);
        if (failed) {
            state->status = failed;
            return SERVE_BROKEN;
        }
        state->served++;
    }
}

/* A pending slot's work: 0 done, CUDA_ERROR_NOT_READY, or the error (also
 * one the driver gave when the work was issued). */
EXPORT int rcuda_executor_slot_query(rcuda_executor *ex, uint32_t slot)
{
    struct served_slot *s = &ex->served->slots[slot];
    return s->status ? s->status : slot_done(ex, s);
}

/* Block until a pending slot's work is done (a waiter thread's call). */
EXPORT int rcuda_executor_slot_wait(rcuda_executor *ex, uint32_t slot)
{
    struct served_slot *s = &ex->served->slots[slot];
    if (s->status)
        return s->status;
    CUresult status = ex->cu.ctx_set_current(ex->context); /* (this thread's) */
    return status ? status : ex->served_cu.event_synchronize(s->event);
}

EXPORT const void *rcuda_executor_slot_buffer(rcuda_executor *ex, uint32_t slot)
{
    return ex->served->slots[slot].buffer;
}

EXPORT void rcuda_executor_slot_free(rcuda_executor *ex, uint32_t slot)
{
    ex->served->slots[slot].busy = 0;
    ex->served->slots[slot].status = 0;
}
