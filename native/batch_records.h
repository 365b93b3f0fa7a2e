/* The records of a `launches` batch (rcuda/wire.py): written by the
 * client's fast paths (launch_fast_path.c, async_fast_path.c) and read by
 * a GPU server's batch executor (batch_executor.c).  Needs wire.h, which
 * native/build.py generates from rcuda/wire.py. */
#ifndef RCUDA_BATCH_RECORDS_H
#define RCUDA_BATCH_RECORDS_H

#include <stdint.h>

/* One record: this header, then its parameters (a launch) or fields (an
 * operation: `fn` at or above WIRE_RECORD_FIRST_OP), padded to 8 bytes. */
struct launch_record {
    uint32_t fn, shared_mem;
    uint32_t grid[3], block[3];
    uint64_t stream;
    uint32_t param_bytes;
} __attribute__((packed));
_Static_assert(sizeof(struct launch_record) == WIRE_LAUNCH_RECORD_SIZE, "rcuda/wire.py LAUNCH_RECORD");

struct memset_fields { /* WIRE_RECORD_MEMSET */
    uint64_t ptr, size;
    uint32_t value;
} __attribute__((packed));
_Static_assert(sizeof(struct memset_fields) == WIRE_MEMSET_FIELDS_SIZE, "rcuda/wire.py MEMSET_FIELDS");

struct dtod_fields { /* WIRE_RECORD_DTOD */
    uint64_t dst, src, size;
} __attribute__((packed));
_Static_assert(sizeof(struct dtod_fields) == WIRE_DTOD_FIELDS_SIZE, "rcuda/wire.py DTOD_FIELDS");

/* WIRE_RECORD_HTOD: the destination (u64), then the bytes. */
_Static_assert(sizeof(uint64_t) == WIRE_HTOD_FIELDS_SIZE, "rcuda/wire.py HTOD_FIELDS");

/* WIRE_RECORD_GRAPH, WIRE_RECORD_EVENT and WIRE_RECORD_WAIT: the graph's or
 * the event's id (u64). */
_Static_assert(sizeof(uint64_t) == WIRE_GRAPH_FIELDS_SIZE && sizeof(uint64_t) == WIRE_EVENT_FIELDS_SIZE,
               "rcuda/wire.py GRAPH_FIELDS, EVENT_FIELDS");

#endif
