/* Just enough msgpack for the C side of the link (native/link.c): writing
 * the small requests C makes itself (maps of short string keys to
 * unsigned integers, one string, an array of them), and reading any reply far enough to find
 * its top-level fields.  Python encodes and decodes everything else.
 *
 * Included into the cffi module before link.c.
 */
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ writing */

struct mp_writer {
    unsigned char *at, *end;
};

static void mp_byte(struct mp_writer *w, unsigned char byte)
{
    if (w->at < w->end)
        *w->at++ = byte;
}

static void mp_big_endian(struct mp_writer *w, uint64_t value, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        mp_byte(w, (unsigned char)(value >> (8 * i)));
}

static void mp_map(struct mp_writer *w, unsigned fields) /* at most 15 */
{
    mp_byte(w, (unsigned char)(0x80 | fields));
}

static void mp_array(struct mp_writer *w, unsigned items) /* at most 65535 */
{
    if (items < 16) {
        mp_byte(w, (unsigned char)(0x90 | items));
    } else {
        mp_byte(w, 0xdc);
        mp_big_endian(w, items, 2);
    }
}

static void mp_str(struct mp_writer *w, const char *text) /* keys and ops: under 32 bytes */
{
    size_t length = strlen(text);
    mp_byte(w, (unsigned char)(0xa0 | length));
    for (size_t i = 0; i < length; i++)
        mp_byte(w, (unsigned char)text[i]);
}

static void mp_uint(struct mp_writer *w, uint64_t value)
{
    if (value < 0x80) {
        mp_byte(w, (unsigned char)value);
    } else if (value <= 0xff) {
        mp_byte(w, 0xcc);
        mp_big_endian(w, value, 1);
    } else if (value <= 0xffff) {
        mp_byte(w, 0xcd);
        mp_big_endian(w, value, 2);
    } else if (value <= 0xffffffffull) {
        mp_byte(w, 0xce);
        mp_big_endian(w, value, 4);
    } else {
        mp_byte(w, 0xcf);
        mp_big_endian(w, value, 8);
    }
}

/* ------------------------------------------------------------ reading */

struct mp_reader {
    const unsigned char *at, *end;
    int ok;
};

/* What a value was: an integer (its value returned), nil, or anything else (skipped). */
enum mp_kind { MP_INT, MP_NIL, MP_OTHER };

static uint64_t mp_get(struct mp_reader *r, int bytes)
{
    if (!r->ok || r->end - r->at < bytes) {
        r->ok = 0;
        return 0;
    }
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = value << 8 | *r->at++;
    return value;
}

static void mp_skip_bytes(struct mp_reader *r, uint64_t count)
{
    if (!r->ok || (uint64_t)(r->end - r->at) < count)
        r->ok = 0;
    else
        r->at += count;
}

/* One value: an integer is returned with *kind MP_INT; a nil is MP_NIL;
 * anything else (strings, maps, arrays, floats, ...) is skipped whole, as
 * MP_OTHER.  Nesting deeper than `depth` clears r->ok. */
static int64_t mp_value(struct mp_reader *r, enum mp_kind *kind, int depth)
{
    *kind = MP_OTHER;
    if (!r->ok || r->at >= r->end || depth < 0) {
        r->ok = 0;
        return 0;
    }
    unsigned char tag = *r->at++;
    uint64_t items = 0; /* a map's or an array's values to skip */
    if (tag < 0x80 || tag >= 0xe0) {
        *kind = MP_INT;
        return tag < 0x80 ? tag : (int8_t)tag;
    }
    if ((tag & 0xf0) == 0x80) {
        items = 2 * (uint64_t)(tag & 0x0f);
    } else if ((tag & 0xf0) == 0x90) {
        items = tag & 0x0f;
    } else if ((tag & 0xe0) == 0xa0) {
        mp_skip_bytes(r, tag & 0x1f);
        return 0;
    } else {
        switch (tag) {
        case 0xc0: *kind = MP_NIL; return 0;
        case 0xc2: case 0xc3: return 0;                                    /* false, true */
        case 0xcc: *kind = MP_INT; return (int64_t)mp_get(r, 1);
        case 0xcd: *kind = MP_INT; return (int64_t)mp_get(r, 2);
        case 0xce: *kind = MP_INT; return (int64_t)mp_get(r, 4);
        case 0xcf: *kind = MP_INT; return (int64_t)mp_get(r, 8);
        case 0xd0: *kind = MP_INT; return (int8_t)mp_get(r, 1);
        case 0xd1: *kind = MP_INT; return (int16_t)mp_get(r, 2);
        case 0xd2: *kind = MP_INT; return (int32_t)mp_get(r, 4);
        case 0xd3: *kind = MP_INT; return (int64_t)mp_get(r, 8);
        case 0xca: mp_skip_bytes(r, 4); return 0;                          /* float32 */
        case 0xcb: mp_skip_bytes(r, 8); return 0;                          /* float64 */
        case 0xc4: case 0xd9: mp_skip_bytes(r, mp_get(r, 1)); return 0;    /* bin8, str8 */
        case 0xc5: case 0xda: mp_skip_bytes(r, mp_get(r, 2)); return 0;    /* bin16, str16 */
        case 0xc6: case 0xdb: mp_skip_bytes(r, mp_get(r, 4)); return 0;    /* bin32, str32 */
        case 0xd4: mp_skip_bytes(r, 2); return 0;                          /* fixext 1..16 */
        case 0xd5: mp_skip_bytes(r, 3); return 0;
        case 0xd6: mp_skip_bytes(r, 5); return 0;
        case 0xd7: mp_skip_bytes(r, 9); return 0;
        case 0xd8: mp_skip_bytes(r, 17); return 0;
        case 0xc7: mp_skip_bytes(r, mp_get(r, 1) + 1); return 0;           /* ext8, 16, 32 */
        case 0xc8: mp_skip_bytes(r, mp_get(r, 2) + 1); return 0;
        case 0xc9: mp_skip_bytes(r, mp_get(r, 4) + 1); return 0;
        case 0xdc: items = mp_get(r, 2); break;                            /* array16, 32 */
        case 0xdd: items = mp_get(r, 4); break;
        case 0xde: items = 2 * mp_get(r, 2); break;                        /* map16, 32 */
        case 0xdf: items = 2 * mp_get(r, 4); break;
        default: r->ok = 0; return 0;                                      /* 0xc1: never used */
        }
    }
    enum mp_kind ignored;
    for (uint64_t i = 0; i < items && r->ok; i++)
        mp_value(r, &ignored, depth - 1);
    return 0;
}

/* A top-level map's size, or -1. */
static int64_t mp_map_size(struct mp_reader *r)
{
    if (!r->ok || r->at >= r->end)
        return -1;
    unsigned char tag = *r->at++;
    if ((tag & 0xf0) == 0x80)
        return tag & 0x0f;
    if (tag == 0xde)
        return (int64_t)mp_get(r, 2);
    if (tag == 0xdf)
        return (int64_t)mp_get(r, 4);
    return -1;
}

/* A string key: its bytes and length. */
static const unsigned char *mp_key(struct mp_reader *r, size_t *length)
{
    if (!r->ok || r->at >= r->end) {
        r->ok = 0;
        return NULL;
    }
    unsigned char tag = *r->at++;
    if ((tag & 0xe0) == 0xa0)
        *length = tag & 0x1f;
    else if (tag == 0xd9)
        *length = (size_t)mp_get(r, 1);
    else if (tag == 0xda)
        *length = (size_t)mp_get(r, 2);
    else {
        r->ok = 0;
        return NULL;
    }
    const unsigned char *key = r->at;
    mp_skip_bytes(r, *length);
    return r->ok ? key : NULL;
}

static int mp_key_is(const unsigned char *key, size_t length, const char *name)
{
    return length == strlen(name) && memcmp(key, name, length) == 0;
}

#define MP_MAX_DEPTH 32

/* A message header's `seq`: 1 with *seq set for an integer, 0 for nil or
 * no seq (an unsolicited notice), -1 when the header is not a readable map. */
static int mp_header_seq(const unsigned char *header, size_t size, uint64_t *seq)
{
    struct mp_reader r = {header, header + size, 1};
    int64_t fields = mp_map_size(&r);
    int found = 0;
    for (int64_t i = 0; i < fields && r.ok; i++) {
        size_t length = 0;
        const unsigned char *key = mp_key(&r, &length);
        enum mp_kind kind;
        int64_t value = r.ok ? mp_value(&r, &kind, MP_MAX_DEPTH) : 0;
        if (r.ok && mp_key_is(key, length, "seq")) {
            found = kind == MP_INT;
            *seq = (uint64_t)value;
        }
    }
    if (fields < 0 || !r.ok || r.at != r.end)
        return -1;
    return found;
}
