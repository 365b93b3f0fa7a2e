/* Sealed records: the interposer's side of a lane under --auth.
 *
 * rcuda/sealed.py has the construction (AES-256-GCM records, the record
 * head as associated data, the record's number as the nonce, Noise's
 * REKEY every WIRE_REKEY_RECORDS records); Python makes the keys and seals
 * the lane's hello, then C carries on from the keys and numbers it hands
 * over (rcuda_link_seal in link.c).
 *
 * The cipher is OpenSSL's libcrypto, opened when the first sealed lane is:
 * a client without a GPU may lack OpenSSL's headers, but not libcrypto,
 * which its Python's ssl module links.  The few EVP functions used are
 * declared here as OpenSSL 3's stable ABI has them.
 *
 * A direction's state is used by one thread at a time: the sending side
 * under the link's `send` lock, the receiving side by the reader.
 *
 * Included into the cffi module before link.c.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/uio.h>

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_cipher_st EVP_CIPHER;

#define SEAL_CTRL_GET_TAG 0x10 /* EVP_CTRL_AEAD_GET_TAG */
#define SEAL_CTRL_SET_TAG 0x11 /* EVP_CTRL_AEAD_SET_TAG */

static struct {
    int tried, loaded;
    EVP_CIPHER_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CIPHER_CTX *);
    const EVP_CIPHER *(*aes_256_gcm)(void);
    int (*encrypt_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
    int (*encrypt_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*encrypt_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    int (*decrypt_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
    int (*decrypt_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*decrypt_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    int (*ctrl)(EVP_CIPHER_CTX *, int, int, void *);
} crypto;
static pthread_mutex_t crypto_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether libcrypto is there (loaded on the first call). */
static int rcuda_seal_available(void)
{
    pthread_mutex_lock(&crypto_lock);
    if (!crypto.tried) {
        crypto.tried = 1;
        void *lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            lib = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
#define SEAL_SYMBOL(field, name) (*(void **)&crypto.field = dlsym(lib, name)) != NULL
            crypto.loaded = SEAL_SYMBOL(ctx_new, "EVP_CIPHER_CTX_new") && SEAL_SYMBOL(ctx_free, "EVP_CIPHER_CTX_free") &&
                            SEAL_SYMBOL(aes_256_gcm, "EVP_aes_256_gcm") &&
                            SEAL_SYMBOL(encrypt_init, "EVP_EncryptInit_ex") &&
                            SEAL_SYMBOL(encrypt_update, "EVP_EncryptUpdate") &&
                            SEAL_SYMBOL(encrypt_final, "EVP_EncryptFinal_ex") &&
                            SEAL_SYMBOL(decrypt_init, "EVP_DecryptInit_ex") &&
                            SEAL_SYMBOL(decrypt_update, "EVP_DecryptUpdate") &&
                            SEAL_SYMBOL(decrypt_final, "EVP_DecryptFinal_ex") &&
                            SEAL_SYMBOL(ctrl, "EVP_CIPHER_CTX_ctrl");
#undef SEAL_SYMBOL
        }
    }
    int loaded = crypto.loaded;
    pthread_mutex_unlock(&crypto_lock);
    return loaded;
}

/* One direction: its cipher context (keyed), key and next record's number. */
struct seal_direction {
    EVP_CIPHER_CTX *ctx;
    unsigned char key[WIRE_SEAL_KEY];
    uint64_t number;
    int sending;
};

static int seal_set_key(struct seal_direction *d)
{
    return d->sending ? crypto.encrypt_init(d->ctx, crypto.aes_256_gcm(), NULL, d->key, NULL) == 1
                      : crypto.decrypt_init(d->ctx, crypto.aes_256_gcm(), NULL, d->key, NULL) == 1;
}

static int seal_direction_init(struct seal_direction *d, const unsigned char *key, uint64_t number, int sending)
{
    memcpy(d->key, key, WIRE_SEAL_KEY);
    d->number = number;
    d->sending = sending;
    d->ctx = crypto.ctx_new();
    return d->ctx && seal_set_key(d);
}

static void seal_nonce(uint64_t number, unsigned char *nonce)
{
    memset(nonce, 0, 4);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (unsigned char)(number >> (56 - 8 * i));
}

/* After a record: the next number, and Noise's REKEY when it is due (the
 * first 32 bytes of the key's encryption of 32 zero bytes, nonce 2^64-1). */
static int seal_advance(struct seal_direction *d)
{
    d->number++;
    if (d->number % WIRE_REKEY_RECORDS)
        return 1;
    EVP_CIPHER_CTX *ctx = crypto.ctx_new();
    unsigned char nonce[WIRE_SEAL_NONCE], zeros[WIRE_SEAL_KEY] = {0}, next[WIRE_SEAL_KEY];
    seal_nonce(UINT64_MAX, nonce);
    int size = 0, ok = ctx && crypto.encrypt_init(ctx, crypto.aes_256_gcm(), NULL, d->key, nonce) == 1 &&
                       crypto.encrypt_update(ctx, next, &size, zeros, (int)sizeof zeros) == 1 &&
                       size == (int)sizeof next;
    if (ctx)
        crypto.ctx_free(ctx);
    if (!ok)
        return 0;
    memcpy(d->key, next, sizeof next);
    return seal_set_key(d);
}

/* Seal the next record from `*parts` (up to WIRE_RECORD_MAX bytes, which
 * are consumed from the parts) into `out`: its size on the wire, or 0 when
 * the cipher failed. */
static size_t seal_record(struct seal_direction *d, struct iovec **parts, int *count, unsigned char *out)
{
    uint32_t size = 0;
    for (int i = 0; i < *count && size < WIRE_RECORD_MAX; i++) {
        size_t left = WIRE_RECORD_MAX - size;
        size += (uint32_t)((*parts)[i].iov_len < left ? (*parts)[i].iov_len : left);
    }
    memcpy(out, &size, WIRE_RECORD_HEAD_SIZE);
    unsigned char nonce[WIRE_SEAL_NONCE], *cipher = out + WIRE_RECORD_HEAD_SIZE;
    seal_nonce(d->number, nonce);
    int n = 0;
    if (crypto.encrypt_init(d->ctx, NULL, NULL, NULL, nonce) != 1 ||
        crypto.encrypt_update(d->ctx, NULL, &n, out, WIRE_RECORD_HEAD_SIZE) != 1)
        return 0;
    uint32_t done = 0;
    while (done < size) {
        struct iovec *part = *parts;
        size_t take = part->iov_len < size - done ? part->iov_len : size - done;
        if (crypto.encrypt_update(d->ctx, cipher + done, &n, part->iov_base, (int)take) != 1 || n != (int)take)
            return 0;
        done += (uint32_t)take;
        part->iov_base = (char *)part->iov_base + take;
        part->iov_len -= take;
        if (!part->iov_len) {
            (*parts)++;
            (*count)--;
        }
    }
    if (crypto.encrypt_final(d->ctx, cipher + size, &n) != 1 ||
        crypto.ctrl(d->ctx, SEAL_CTRL_GET_TAG, WIRE_SEAL_TAG, cipher + size) != 1 || !seal_advance(d))
        return 0;
    return WIRE_RECORD_HEAD_SIZE + size + WIRE_SEAL_TAG;
}

/* Open a record: `head`, then `size` bytes of ciphertext at `cipher` and its
 * tag, into `into` (which may be `cipher`).  0 when it fails its check. */
static int open_record(struct seal_direction *d, const unsigned char *head, const unsigned char *cipher,
                       uint32_t size, unsigned char *into)
{
    unsigned char nonce[WIRE_SEAL_NONCE], tag[WIRE_SEAL_TAG];
    memcpy(tag, cipher + size, sizeof tag); /* before an in-place open can touch it */
    seal_nonce(d->number, nonce);
    int n = 0;
    return crypto.decrypt_init(d->ctx, NULL, NULL, NULL, nonce) == 1 &&
           crypto.decrypt_update(d->ctx, NULL, &n, head, WIRE_RECORD_HEAD_SIZE) == 1 &&
           crypto.decrypt_update(d->ctx, into, &n, cipher, (int)size) == 1 && n == (int)size &&
           crypto.ctrl(d->ctx, SEAL_CTRL_SET_TAG, WIRE_SEAL_TAG, tag) == 1 &&
           crypto.decrypt_final(d->ctx, into + size, &n) == 1 && seal_advance(d);
}

/* A link's sealing: both directions, the record being written, and the
 * ciphertext read but not yet opened. */
struct sealed {
    struct seal_direction out, in;
    unsigned char *record;          /* WIRE_RECORD_MAX + head + tag */
    unsigned char *raw;             /* SEALED_RAW_SIZE */
    size_t raw_start, raw_end;
};

/* Ciphertext read ahead beyond the record being opened: small records
 * (most replies) then cost one recv for several. */
#define SEALED_READ_AHEAD (64u << 10)
#define SEALED_RECORD_WIRE_MAX (WIRE_RECORD_HEAD_SIZE + WIRE_RECORD_MAX + WIRE_SEAL_TAG)
#define SEALED_RAW_SIZE (SEALED_RECORD_WIRE_MAX + SEALED_READ_AHEAD)

static void sealed_free(struct sealed *s)
{
    if (!s)
        return;
    if (s->out.ctx)
        crypto.ctx_free(s->out.ctx);
    if (s->in.ctx)
        crypto.ctx_free(s->in.ctx);
    free(s->record);
    free(s->raw);
    free(s);
}

static struct sealed *sealed_new(const unsigned char *send_key, uint64_t send_number,
                                 const unsigned char *receive_key, uint64_t receive_number)
{
    if (!rcuda_seal_available())
        return NULL;
    struct sealed *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->record = malloc(SEALED_RECORD_WIRE_MAX);
    s->raw = malloc(SEALED_RAW_SIZE);
    if (!s->record || !s->raw || !seal_direction_init(&s->out, send_key, send_number, 1) ||
        !seal_direction_init(&s->in, receive_key, receive_number, 0)) {
        sealed_free(s);
        return NULL;
    }
    return s;
}
