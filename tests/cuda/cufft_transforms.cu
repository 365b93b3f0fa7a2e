// cuFFT, as an ordinary program uses it: plans of every kind (cufftPlan1d/2d/3d,
// cufftPlanMany with an advanced layout, cufftCreate + cufftMakePlan* with
// work-size queries and a work area of the program's own), every exec type in
// 1-3 dimensions, in place and out of place, on a stream; an FFT convolution;
// cufftXt's typed plans and cufftXtExec; the 64-bit plan forms; cuFFT's errors,
// and callbacks refused by name.  References are plain host DFTs in double precision.
// Each section (the arguments; all without any) prints "ok NAME"; a failure
// prints "FAILED line N ...".
#include "library_check.h"

#include <cufft.h>
#include <cufftXt.h>

typedef std::complex<double> cd;
static const double PI = 3.14159265358979323846;
static const double FTOL = 2e-5, DTOL = 1e-11;

// ---- host references ----------------------------------------------------

static int volume(const std::vector<int> &n) {
    int v = 1;
    for (int d : n) v *= d;
    return v;
}

// Unnormalised DFT of one row-major array of dims n; sign -1 forward, +1 inverse.
static std::vector<cd> dft(const std::vector<cd> &x, const std::vector<int> &n, int sign) {
    int total = volume(n), rank = (int)n.size();
    std::vector<cd> out(total);
    std::vector<int> k(rank), j(rank);
    for (int ko = 0; ko < total; ko++) {
        for (int d = rank - 1, r = ko; d >= 0; d--) { k[d] = r % n[d]; r /= n[d]; }
        cd sum = 0;
        for (int jo = 0; jo < total; jo++) {
            double phase = 0;
            for (int d = rank - 1, r = jo; d >= 0; d--) {
                j[d] = r % n[d]; r /= n[d];
                phase += (double)k[d] * j[d] / n[d];
            }
            sum += x[jo] * std::polar(1.0, sign * 2 * PI * phase);
        }
        out[ko] = sum;
    }
    return out;
}

// The first n[-1]/2+1 of the last dimension: R2C's output layout.
static std::vector<cd> half_spectrum(const std::vector<cd> &full, const std::vector<int> &n) {
    int last = n.back(), half = last / 2 + 1, rows = volume(n) / last;
    std::vector<cd> out(rows * half);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < half; i++) out[r * half + i] = full[r * last + i];
    return out;
}

static double max_abs(const std::vector<cd> &v) {
    double m = 1e-30;
    for (auto &z : v) m = std::max(m, std::abs(z));
    return m;
}

template <class C> static cd as_cd(const C &c) { return cd(c.x, c.y); }

// Largest |got - want| relative to want's largest magnitude.
template <class C> static double rel_err(const C *got, const std::vector<cd> &want) {
    double err = 0;
    for (size_t i = 0; i < want.size(); i++) err = std::max(err, std::abs(as_cd(got[i]) - want[i]));
    return err / max_abs(want);
}

template <class R> static double rel_err_real(const R *got, const std::vector<double> &want, double scale = 1) {
    double err = 0, m = 1e-30;
    for (size_t i = 0; i < want.size(); i++) {
        err = std::max(err, std::fabs(got[i] / scale - want[i]));
        m = std::max(m, std::fabs(want[i]));
    }
    return err / m;
}

template <class C> static std::vector<C> random_complex(int n, std::vector<cd> &ref) {
    std::vector<C> v(n);
    ref.resize(n);
    for (int i = 0; i < n; i++) {
        v[i].x = next_value(); v[i].y = next_value();
        ref[i] = cd(v[i].x, v[i].y);
    }
    return v;
}

template <class R> static std::vector<R> random_real(int n, std::vector<double> &ref) {
    std::vector<R> v(n);
    ref.resize(n);
    for (int i = 0; i < n; i++) ref[i] = v[i] = (R)next_value();
    return v;
}

// ---- sections -----------------------------------------------------------

// cufftPlan1d, batched C2C, on a stream: forward against the DFT, inverse in
// place back to the input times n.
static void plan1d_c2c() {
    const int n = 12, batch = 3;
    std::vector<cd> ref;
    auto x = random_complex<cufftComplex>(n * batch, ref);
    cufftComplex *in = to_device(x), *out;
    CHECK(cudaMalloc(&out, sizeof(cufftComplex) * n * batch));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cufftHandle plan;
    CUFFT_CHECK(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
    CUFFT_CHECK(cufftSetStream(plan, stream));
    CUFFT_CHECK(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
    CHECK(cudaStreamSynchronize(stream));
    auto got = to_host<cufftComplex>(out, n * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(ref.begin() + b * n, ref.begin() + (b + 1) * n);
        AT_MOST(rel_err(got.data() + b * n, dft(row, {n}, -1)), FTOL);
    }
    CUFFT_CHECK(cufftExecC2C(plan, out, out, CUFFT_INVERSE));
    std::vector<cufftComplex> back(n * batch);
    CHECK(cudaMemcpyAsync(back.data(), out, sizeof(cufftComplex) * n * batch, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (auto &c : back) { c.x /= n; c.y /= n; }
    AT_MOST(rel_err(back.data(), ref), FTOL);
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
}

// R2C then C2R, 1-D batched, out of place and in place (rows padded to
// 2 * (n/2 + 1) reals, cuFFT's in-place layout).
static void r2c_c2r_1d() {
    const int n = 30, half = n / 2 + 1, batch = 2;
    std::vector<double> ref;
    auto x = random_real<float>(n * batch, ref);
    float *in = to_device(x);
    cufftComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftComplex) * half * batch));
    float *out;
    CHECK(cudaMalloc(&out, sizeof(float) * n * batch));
    cufftHandle fwd, inv;
    CUFFT_CHECK(cufftPlan1d(&fwd, n, CUFFT_R2C, batch));
    CUFFT_CHECK(cufftPlan1d(&inv, n, CUFFT_C2R, batch));
    CUFFT_CHECK(cufftExecR2C(fwd, in, spec));
    auto got = to_host<cufftComplex>(spec, half * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(ref.begin() + b * n, ref.begin() + (b + 1) * n);
        AT_MOST(rel_err(got.data() + b * half, half_spectrum(dft(row, {n}, -1), {n})), FTOL);
    }
    CUFFT_CHECK(cufftExecC2R(inv, spec, out));
    AT_MOST(rel_err_real(to_host<float>(out, n * batch).data(), ref, n), FTOL);

    // in place: one buffer of batch rows of 2 * half reals
    std::vector<float> padded(2 * half * batch, 0.0f);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < n; i++) padded[b * 2 * half + i] = x[b * n + i];
    float *buf = to_device(padded);
    CUFFT_CHECK(cufftExecR2C(fwd, buf, (cufftComplex *)buf));
    auto in_place = to_host((cufftComplex *)buf, half * batch);
    double diff = 0;  // the same spectra as out of place
    for (int i = 0; i < half * batch; i++) diff = std::max(diff, std::abs(as_cd(in_place[i]) - as_cd(got[i])));
    AT_MOST(diff / n, FTOL);
    CUFFT_CHECK(cufftExecC2R(inv, (cufftComplex *)buf, buf));
    auto back = to_host<float>(buf, 2 * half * batch);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < n; i++) AT_MOST(std::fabs(back[b * 2 * half + i] / n - ref[b * n + i]), FTOL);
    CUFFT_CHECK(cufftDestroy(fwd));
    CUFFT_CHECK(cufftDestroy(inv));
    CHECK(cudaFree(in));
    CHECK(cudaFree(spec));
    CHECK(cudaFree(out));
    CHECK(cudaFree(buf));
}

// Double precision: Z2Z against the DFT and back, D2Z + Z2D round trip.
static void double_1d() {
    const int n = 20, half = n / 2 + 1, batch = 2;
    std::vector<cd> ref;
    auto x = random_complex<cufftDoubleComplex>(n * batch, ref);
    cufftDoubleComplex *data = to_device(x);
    cufftHandle plan;
    CUFFT_CHECK(cufftPlan1d(&plan, n, CUFFT_Z2Z, batch));
    CUFFT_CHECK(cufftExecZ2Z(plan, data, data, CUFFT_FORWARD));
    auto got = to_host<cufftDoubleComplex>(data, n * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(ref.begin() + b * n, ref.begin() + (b + 1) * n);
        AT_MOST(rel_err(got.data() + b * n, dft(row, {n}, -1)), DTOL);
    }
    CUFFT_CHECK(cufftExecZ2Z(plan, data, data, CUFFT_INVERSE));
    auto back = to_host<cufftDoubleComplex>(data, n * batch);
    for (auto &c : back) { c.x /= n; c.y /= n; }
    AT_MOST(rel_err(back.data(), ref), DTOL);
    CUFFT_CHECK(cufftDestroy(plan));

    std::vector<double> rref;
    auto r = random_real<double>(n * batch, rref);
    double *in = to_device(r), *out;
    cufftDoubleComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftDoubleComplex) * half * batch));
    CHECK(cudaMalloc(&out, sizeof(double) * n * batch));
    cufftHandle fwd, inv;
    CUFFT_CHECK(cufftPlan1d(&fwd, n, CUFFT_D2Z, batch));
    CUFFT_CHECK(cufftPlan1d(&inv, n, CUFFT_Z2D, batch));
    CUFFT_CHECK(cufftExecD2Z(fwd, in, spec));
    auto s = to_host<cufftDoubleComplex>(spec, half * batch);
    std::vector<cd> row(rref.begin(), rref.begin() + n);
    AT_MOST(rel_err(s.data(), half_spectrum(dft(row, {n}, -1), {n})), DTOL);
    CUFFT_CHECK(cufftExecZ2D(inv, spec, out));
    AT_MOST(rel_err_real(to_host<double>(out, n * batch).data(), rref, n), DTOL);
    CUFFT_CHECK(cufftDestroy(fwd));
    CUFFT_CHECK(cufftDestroy(inv));
    CHECK(cudaFree(data));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFree(spec));
}

// cufftPlan2d: C2C against the 2-D DFT and back; R2C + C2R in place with
// padded rows.
static void plan2d() {
    const int nx = 8, ny = 6, half = ny / 2 + 1;
    std::vector<cd> ref;
    auto x = random_complex<cufftComplex>(nx * ny, ref);
    cufftComplex *data = to_device(x);
    cufftHandle plan;
    CUFFT_CHECK(cufftPlan2d(&plan, nx, ny, CUFFT_C2C));
    CUFFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host<cufftComplex>(data, nx * ny).data(), dft(ref, {nx, ny}, -1)), FTOL);
    CUFFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_INVERSE));
    auto back = to_host<cufftComplex>(data, nx * ny);
    for (auto &c : back) { c.x /= nx * ny; c.y /= nx * ny; }
    AT_MOST(rel_err(back.data(), ref), FTOL);
    CUFFT_CHECK(cufftDestroy(plan));

    std::vector<double> rref;
    auto r = random_real<float>(nx * ny, rref);
    std::vector<float> padded(nx * 2 * half, 0.0f);
    for (int i = 0; i < nx; i++)
        for (int j = 0; j < ny; j++) padded[i * 2 * half + j] = r[i * ny + j];
    float *buf = to_device(padded);
    cufftHandle fwd, inv;
    CUFFT_CHECK(cufftPlan2d(&fwd, nx, ny, CUFFT_R2C));
    CUFFT_CHECK(cufftPlan2d(&inv, nx, ny, CUFFT_C2R));
    CUFFT_CHECK(cufftExecR2C(fwd, buf, (cufftComplex *)buf));
    std::vector<cd> rc(rref.begin(), rref.end());
    AT_MOST(rel_err(to_host((cufftComplex *)buf, nx * half).data(), half_spectrum(dft(rc, {nx, ny}, -1), {nx, ny})),
            FTOL);
    CUFFT_CHECK(cufftExecC2R(inv, (cufftComplex *)buf, buf));
    auto out = to_host<float>(buf, nx * 2 * half);
    for (int i = 0; i < nx; i++)
        for (int j = 0; j < ny; j++) AT_MOST(std::fabs(out[i * 2 * half + j] / (nx * ny) - rref[i * ny + j]), FTOL);
    CUFFT_CHECK(cufftDestroy(fwd));
    CUFFT_CHECK(cufftDestroy(inv));
    CHECK(cudaFree(data));
    CHECK(cudaFree(buf));
}

// cufftPlan3d: Z2Z against the 3-D DFT; D2Z + Z2D out of place; C2C in place.
static void plan3d() {
    const int nx = 4, ny = 5, nz = 6, total = nx * ny * nz, halfz = nz / 2 + 1;
    std::vector<cd> ref;
    auto x = random_complex<cufftDoubleComplex>(total, ref);
    cufftDoubleComplex *in = to_device(x), *out;
    CHECK(cudaMalloc(&out, sizeof(cufftDoubleComplex) * total));
    cufftHandle plan;
    CUFFT_CHECK(cufftPlan3d(&plan, nx, ny, nz, CUFFT_Z2Z));
    CUFFT_CHECK(cufftExecZ2Z(plan, in, out, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host<cufftDoubleComplex>(out, total).data(), dft(ref, {nx, ny, nz}, -1)), DTOL);
    CUFFT_CHECK(cufftExecZ2Z(plan, out, in, CUFFT_INVERSE));
    auto back = to_host<cufftDoubleComplex>(in, total);
    for (auto &c : back) { c.x /= total; c.y /= total; }
    AT_MOST(rel_err(back.data(), ref), DTOL);
    CUFFT_CHECK(cufftDestroy(plan));

    std::vector<double> rref;
    auto r = random_real<double>(total, rref);
    double *rin = to_device(r), *rout;
    CHECK(cudaMalloc(&rout, sizeof(double) * total));
    cufftHandle fwd, inv;
    CUFFT_CHECK(cufftPlan3d(&fwd, nx, ny, nz, CUFFT_D2Z));
    CUFFT_CHECK(cufftPlan3d(&inv, nx, ny, nz, CUFFT_Z2D));
    CUFFT_CHECK(cufftExecD2Z(fwd, rin, out));
    std::vector<cd> rc(rref.begin(), rref.end());
    AT_MOST(rel_err(to_host<cufftDoubleComplex>(out, nx * ny * halfz).data(),
                    half_spectrum(dft(rc, {nx, ny, nz}, -1), {nx, ny, nz})),
            DTOL);
    CUFFT_CHECK(cufftExecZ2D(inv, out, rout));
    AT_MOST(rel_err_real(to_host<double>(rout, total).data(), rref, total), DTOL);
    CUFFT_CHECK(cufftDestroy(fwd));
    CUFFT_CHECK(cufftDestroy(inv));

    std::vector<cd> fref;
    auto f = random_complex<cufftComplex>(total, fref);
    cufftComplex *fdata = to_device(f);
    CUFFT_CHECK(cufftPlan3d(&plan, nx, ny, nz, CUFFT_C2C));
    CUFFT_CHECK(cufftExecC2C(plan, fdata, fdata, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host<cufftComplex>(fdata, total).data(), dft(fref, {nx, ny, nz}, -1)), FTOL);
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFree(rin));
    CHECK(cudaFree(rout));
    CHECK(cudaFree(fdata));
}

// cufftPlanMany with advanced layouts: interleaved batches in (istride =
// batch, idist = 1), padded rows out (odist > n) whose gaps stay untouched;
// a 2-D R2C from rows of 9 reals into rows of 5 complex; and NULL embeds
// (the basic layout) as a batched cufftPlan2d.
static void plan_many() {
    const int n = 8, batch = 4, orow = 10;
    std::vector<cd> ref;
    auto x = random_complex<cufftComplex>(n * batch, ref);  // element j of batch b at j * batch + b
    cufftComplex *in = to_device(x);
    std::vector<cufftComplex> sentinel(orow * batch, cufftComplex{1234.0f, -1234.0f});
    cufftComplex *out = to_device(sentinel);
    int dims[1] = {n}, inembed[1] = {n}, onembed[1] = {orow};
    cufftHandle plan;
    CUFFT_CHECK(cufftPlanMany(&plan, 1, dims, inembed, batch, 1, onembed, 1, orow, CUFFT_C2C, batch));
    CUFFT_CHECK(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
    auto got = to_host<cufftComplex>(out, orow * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(n);
        for (int j = 0; j < n; j++) row[j] = ref[j * batch + b];
        AT_MOST(rel_err(got.data() + b * orow, dft(row, {n}, -1)), FTOL);
        for (int j = n; j < orow; j++) REQUIRE(got[b * orow + j].x == 1234.0f && got[b * orow + j].y == -1234.0f);
    }
    CUFFT_CHECK(cufftDestroy(plan));

    // 2-D R2C, n = {6, 8}: input rows of 9 reals, output rows of 5 complex (exactly n/2+1)
    const int nx = 6, ny = 8, irow = 9, half = ny / 2 + 1, idist = nx * irow, odist = nx * half, batch2 = 2;
    std::vector<double> rref;
    auto r = random_real<float>(idist * batch2, rref);
    float *rin = to_device(r);
    cufftComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftComplex) * odist * batch2));
    int n2[2] = {nx, ny}, ie[2] = {nx, irow}, oe[2] = {nx, half};
    CUFFT_CHECK(cufftPlanMany(&plan, 2, n2, ie, 1, idist, oe, 1, odist, CUFFT_R2C, batch2));
    CUFFT_CHECK(cufftExecR2C(plan, rin, spec));
    auto s = to_host<cufftComplex>(spec, odist * batch2);
    for (int b = 0; b < batch2; b++) {
        std::vector<cd> a(nx * ny);
        for (int i = 0; i < nx; i++)
            for (int j = 0; j < ny; j++) a[i * ny + j] = rref[b * idist + i * irow + j];
        AT_MOST(rel_err(s.data() + b * odist, half_spectrum(dft(a, {nx, ny}, -1), {nx, ny})), FTOL);
    }
    CUFFT_CHECK(cufftDestroy(plan));

    // NULL embeds: the basic layout, strides and distances ignored
    std::vector<cd> bref;
    auto bx = random_complex<cufftComplex>(nx * ny * batch2, bref);
    cufftComplex *bdata = to_device(bx);
    CUFFT_CHECK(cufftPlanMany(&plan, 2, n2, NULL, 7, 3, NULL, 5, 2, CUFFT_C2C, batch2));
    CUFFT_CHECK(cufftExecC2C(plan, bdata, bdata, CUFFT_FORWARD));
    auto bgot = to_host<cufftComplex>(bdata, nx * ny * batch2);
    for (int b = 0; b < batch2; b++) {
        std::vector<cd> a(bref.begin() + b * nx * ny, bref.begin() + (b + 1) * nx * ny);
        AT_MOST(rel_err(bgot.data() + b * nx * ny, dft(a, {nx, ny}, -1)), FTOL);
    }
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFree(rin));
    CHECK(cudaFree(spec));
    CHECK(cudaFree(bdata));
}

// cufftCreate + cufftMakePlan1d/2d/Many with the work-size queries, and a
// work area of the program's own (cufftSetAutoAllocation(0) + cufftSetWorkArea).
static void make_plans() {
    const int n = 64, batch = 2;
    std::vector<cd> ref;
    auto x = random_complex<cufftComplex>(n * batch, ref);
    cufftComplex *data = to_device(x);
    cufftHandle plan;
    size_t estimate = 0, made = 0, queried = 1;
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftGetSize1d(plan, n, CUFFT_C2C, batch, &estimate));
    CUFFT_CHECK(cufftSetAutoAllocation(plan, 0));
    CUFFT_CHECK(cufftMakePlan1d(plan, n, CUFFT_C2C, batch, &made));
    CUFFT_CHECK(cufftGetSize(plan, &queried));
    REQUIRE(queried == made);
    void *work = nullptr;
    CHECK(cudaMalloc(&work, made ? made : 1));
    CUFFT_CHECK(cufftSetWorkArea(plan, work));
    CUFFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
    auto got = to_host<cufftComplex>(data, n * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(ref.begin() + b * n, ref.begin() + (b + 1) * n);
        AT_MOST(rel_err(got.data() + b * n, dft(row, {n}, -1)), FTOL);
    }
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaFree(work));

    const int nx = 5, ny = 4;
    std::vector<cd> ref2;
    auto y = random_complex<cufftDoubleComplex>(nx * ny, ref2);
    cufftDoubleComplex *d2 = to_device(y);
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftGetSize2d(plan, nx, ny, CUFFT_Z2Z, &estimate));
    CUFFT_CHECK(cufftMakePlan2d(plan, nx, ny, CUFFT_Z2Z, &made));
    CUFFT_CHECK(cufftGetSize(plan, &queried));
    REQUIRE(queried == made);
    CUFFT_CHECK(cufftExecZ2Z(plan, d2, d2, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host<cufftDoubleComplex>(d2, nx * ny).data(), dft(ref2, {nx, ny}, -1)), DTOL);
    CUFFT_CHECK(cufftDestroy(plan));

    const int m = 16, mb = 3, half = m / 2 + 1;
    std::vector<double> rref;
    auto r = random_real<float>(m * mb, rref);
    float *rin = to_device(r);
    cufftComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftComplex) * half * mb));
    int dims[1] = {m};
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftGetSizeMany(plan, 1, dims, NULL, 1, m, NULL, 1, half, CUFFT_R2C, mb, &estimate));
    CUFFT_CHECK(cufftMakePlanMany(plan, 1, dims, NULL, 1, m, NULL, 1, half, CUFFT_R2C, mb, &made));
    CUFFT_CHECK(cufftExecR2C(plan, rin, spec));
    auto s = to_host<cufftComplex>(spec, half * mb);
    for (int b = 0; b < mb; b++) {
        std::vector<cd> row(rref.begin() + b * m, rref.begin() + (b + 1) * m);
        AT_MOST(rel_err(s.data() + b * half, half_spectrum(dft(row, {m}, -1), {m})), FTOL);
    }
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaFree(data));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(rin));
    CHECK(cudaFree(spec));
}

// Linear convolution of two real signals by FFT: both zero-padded to N in
// one batched R2C, spectra multiplied (on the host), one C2R, against the
// direct sum.
static void convolution() {
    const int la = 50, lb = 30, len = la + lb - 1, N = 128, half = N / 2 + 1;
    std::vector<float> signals(2 * N, 0.0f);
    std::vector<double> a(la), b(lb);
    for (int i = 0; i < la; i++) signals[i] = (float)(a[i] = std::sin(0.3 * i) + 0.1 * next_value());
    for (int i = 0; i < lb; i++) signals[N + i] = (float)(b[i] = std::exp(-0.1 * i));
    float *dsig = to_device(signals), *result;
    cufftComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftComplex) * 2 * half));
    CHECK(cudaMalloc(&result, sizeof(float) * N));
    cufftHandle fwd, inv;
    CUFFT_CHECK(cufftPlan1d(&fwd, N, CUFFT_R2C, 2));
    CUFFT_CHECK(cufftPlan1d(&inv, N, CUFFT_C2R, 1));
    CUFFT_CHECK(cufftExecR2C(fwd, dsig, spec));
    auto s = to_host<cufftComplex>(spec, 2 * half);
    std::vector<cufftComplex> product(half);
    for (int k = 0; k < half; k++) {
        cd p = as_cd(s[k]) * as_cd(s[half + k]);
        product[k].x = (float)p.real();
        product[k].y = (float)p.imag();
    }
    CHECK(cudaMemcpy(spec, product.data(), sizeof(cufftComplex) * half, cudaMemcpyHostToDevice));
    CUFFT_CHECK(cufftExecC2R(inv, spec, result));
    auto got = to_host<float>(result, N);
    std::vector<double> want(len, 0.0);
    for (int i = 0; i < la; i++)
        for (int j = 0; j < lb; j++) want[i + j] += (double)(float)a[i] * (double)(float)b[j];
    AT_MOST(rel_err_real(got.data(), want, N), 1e-5);
    for (int i = len; i < N; i++) AT_MOST(std::fabs(got[i] / N), 1e-5);  // beyond the support: zero
    CUFFT_CHECK(cufftDestroy(fwd));
    CUFFT_CHECK(cufftDestroy(inv));
    CHECK(cudaFree(dsig));
    CHECK(cudaFree(spec));
    CHECK(cudaFree(result));
}

// cuFFT's statuses for bad sizes, types, directions and plans.
static void errors() {
    cufftComplex *d;
    CHECK(cudaMalloc(&d, sizeof(cufftComplex) * 64));
    cufftHandle plan;
    CUFFT_EXPECT(cufftPlan1d(&plan, 0, CUFFT_C2C, 1), CUFFT_INVALID_SIZE);
    CUFFT_EXPECT(cufftPlan1d(&plan, 16, CUFFT_C2C, 0), CUFFT_INVALID_SIZE);
    CUFFT_EXPECT(cufftPlan2d(&plan, 4, -1, CUFFT_C2C), CUFFT_INVALID_SIZE);
    cufftResult r = cufftPlan1d(&plan, 16, (cufftType)0x33, 1);
    printf("cufftPlan1d of type 0x33 -> %d\n", (int)r);
    REQUIRE(r == CUFFT_INVALID_TYPE || r == CUFFT_INVALID_VALUE);

    CUFFT_CHECK(cufftPlan1d(&plan, 16, CUFFT_C2C, 1));
    r = cufftExecR2C(plan, (cufftReal *)d, d);  // a C2C plan
    printf("cufftExecR2C on a C2C plan -> %d\n", (int)r);
    REQUIRE(r == CUFFT_INVALID_TYPE || r == CUFFT_INVALID_VALUE);
    r = cufftExecZ2Z(plan, (cufftDoubleComplex *)d, (cufftDoubleComplex *)d, CUFFT_FORWARD);
    REQUIRE(r == CUFFT_INVALID_TYPE || r == CUFFT_INVALID_VALUE);
    CUFFT_EXPECT(cufftExecC2C(plan, d, d, 0), CUFFT_INVALID_VALUE);
    CUFFT_CHECK(cufftExecC2C(plan, d, d, CUFFT_FORWARD));  // the plan still works
    CUFFT_CHECK(cufftDestroy(plan));
    CUFFT_EXPECT(cufftExecC2C(plan, d, d, CUFFT_FORWARD), CUFFT_INVALID_PLAN);

    cufftHandle empty;
    CUFFT_CHECK(cufftCreate(&empty));
    r = cufftExecC2C(empty, d, d, CUFFT_FORWARD);  // created, never made
    REQUIRE(r != CUFFT_SUCCESS);
    CUFFT_CHECK(cufftDestroy(empty));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d));
}

// cufftXtMakePlanMany's typed plans (NVIDIA's simpleCUFFT makes its plan so)
// and cufftXtExec, which runs any plan: an R2C one against the DFT, then a
// double C2C one forward and back; half precision is refused by name.
static void xt_plans() {
    const int n = 24, half = n / 2 + 1, batch = 2;
    std::vector<double> ref;
    auto x = random_real<float>(n * batch, ref);
    float *in = to_device(x);
    cufftComplex *spec;
    CHECK(cudaMalloc(&spec, sizeof(cufftComplex) * half * batch));
    cufftHandle r2c;
    CUFFT_CHECK(cufftCreate(&r2c));
    long long sizes[1] = {n};
    size_t estimate = 0, work = 0;
    CUFFT_CHECK(cufftXtGetSizeMany(r2c, 1, sizes, nullptr, 1, n, CUDA_R_32F, nullptr, 1, half, CUDA_C_32F, batch,
                                   &estimate, CUDA_C_32F));
    REQUIRE(estimate > 0);  // before the plan is made: cuFFT's estimate
    CUFFT_CHECK(cufftXtMakePlanMany(r2c, 1, sizes, nullptr, 1, n, CUDA_R_32F, nullptr, 1, half, CUDA_C_32F, batch,
                                    &work, CUDA_C_32F));
    REQUIRE(work <= estimate);
    CUFFT_CHECK(cufftXtExec(r2c, in, spec, CUFFT_FORWARD));
    auto got = to_host<cufftComplex>(spec, half * batch);
    for (int b = 0; b < batch; b++) {
        std::vector<cd> row(ref.begin() + b * n, ref.begin() + (b + 1) * n);
        AT_MOST(rel_err(got.data() + b * half, half_spectrum(dft(row, {n}, -1), {n})), FTOL);
    }
    CUFFT_EXPECT(cufftXtExec(r2c, nullptr, spec, CUFFT_FORWARD), CUFFT_INVALID_VALUE);

    std::vector<cd> zref;
    auto z = random_complex<cufftDoubleComplex>(n, zref);
    cufftDoubleComplex *zd = to_device(z);
    cufftHandle z2z;
    CUFFT_CHECK(cufftCreate(&z2z));
    CUFFT_CHECK(cufftXtMakePlanMany(z2z, 1, sizes, nullptr, 1, n, CUDA_C_64F, nullptr, 1, n, CUDA_C_64F, 1, &work,
                                    CUDA_C_64F));
    CUFFT_CHECK(cufftXtExec(z2z, zd, zd, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host<cufftDoubleComplex>(zd, n).data(), dft(zref, {n}, -1)), DTOL);
    CUFFT_CHECK(cufftXtExec(z2z, zd, zd, CUFFT_INVERSE));
    auto back = to_host<cufftDoubleComplex>(zd, n);
    for (auto &c : back) { c.x /= n; c.y /= n; }
    AT_MOST(rel_err(back.data(), zref), DTOL);
    CUFFT_EXPECT(cufftXtExec(z2z, zd, zd, 0), CUFFT_INVALID_VALUE);  // a complex transform needs its direction

    cufftHandle other;
    CUFFT_CHECK(cufftCreate(&other));
    CUFFT_EXPECT(cufftXtMakePlanMany(other, 1, sizes, nullptr, 1, n, CUDA_R_16F, nullptr, 1, half, CUDA_C_16F,
                                     1, &work, CUDA_C_16F), CUFFT_NOT_SUPPORTED);
    CUFFT_EXPECT(cufftXtMakePlanMany(other, 1, sizes, nullptr, 1, n, CUDA_R_32F, nullptr, 1, n, CUDA_R_32F, 1,
                                     &work, CUDA_R_32F), CUFFT_INVALID_TYPE);
    CUFFT_CHECK(cufftDestroy(other));
    CUFFT_CHECK(cufftDestroy(r2c));
    CUFFT_CHECK(cufftDestroy(z2z));
    CHECK(cudaFree(in));
    CHECK(cudaFree(spec));
    CHECK(cudaFree(zd));
}

// The 64-bit plan forms: cufftGetSizeMany64 (an estimate before the plan is
// made, the plan's size after), cufftMakePlanMany64 with an advanced layout
// (a 2-D Z2D from padded complex rows into padded real rows) and a batched
// C2C in place, cufftXtGetSizeMany/cufftXtMakePlanMany of a D2Z run by
// cufftXtExec; the sizes' checks.
static void plans64() {
    const int nx = 4, ny = 6, half = ny / 2 + 1, crow = half + 2, rrow = ny + 3, batch = 2;
    const long long idist = nx * crow, odist = nx * rrow;
    // a Hermitian input: the half spectrum of a real array's transform
    std::vector<double> real_ref;
    auto reals = random_real<double>(nx * ny * batch, real_ref);
    std::vector<cufftDoubleComplex> spectra(idist * batch, cufftDoubleComplex{99.0, 99.0});
    for (int b = 0; b < batch; b++) {
        std::vector<cd> a(real_ref.begin() + b * nx * ny, real_ref.begin() + (b + 1) * nx * ny);
        auto full = dft(a, {nx, ny}, -1);
        for (int i = 0; i < nx; i++)
            for (int j = 0; j < half; j++) {
                spectra[b * idist + i * crow + j].x = full[i * ny + j].real();
                spectra[b * idist + i * crow + j].y = full[i * ny + j].imag();
            }
    }
    cufftDoubleComplex *in = to_device(spectra);
    double *out;
    CHECK(cudaMalloc(&out, sizeof(double) * odist * batch));
    long long n[2] = {nx, ny}, ie[2] = {nx, crow}, oe[2] = {nx, rrow};
    cufftHandle plan;
    size_t estimate = 0, made = 0, queried = 0;
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftGetSizeMany64(plan, 2, n, ie, 1, idist, oe, 1, odist, CUFFT_Z2D, batch, &estimate));
    REQUIRE(estimate > 0);
    CUFFT_CHECK(cufftMakePlanMany64(plan, 2, n, ie, 1, idist, oe, 1, odist, CUFFT_Z2D, batch, &made));
    CUFFT_CHECK(cufftGetSizeMany64(plan, 2, n, ie, 1, idist, oe, 1, odist, CUFFT_Z2D, batch, &queried));
    REQUIRE(queried == made);
    CUFFT_CHECK(cufftExecZ2D(plan, in, out));
    auto got = to_host(out, odist * batch);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < nx; i++)
            for (int j = 0; j < ny; j++)
                AT_MOST(std::fabs(got[b * odist + i * rrow + j] / (nx * ny) - real_ref[b * nx * ny + i * ny + j]),
                        DTOL);
    CUFFT_CHECK(cufftDestroy(plan));

    // a batched C2C in place, basic layout (NULL embeds)
    const int m = 30, mb = 3;
    std::vector<cd> cref;
    auto c = random_complex<cufftComplex>(m * mb, cref);
    cufftComplex *cdata = to_device(c);
    long long mm[1] = {m};
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftMakePlanMany64(plan, 1, mm, nullptr, 1, m, nullptr, 1, m, CUFFT_C2C, mb, &made));
    CUFFT_CHECK(cufftExecC2C(plan, cdata, cdata, CUFFT_INVERSE));
    auto cgot = to_host(cdata, m * mb);
    for (int b = 0; b < mb; b++) {
        std::vector<cd> row(cref.begin() + b * m, cref.begin() + (b + 1) * m);
        AT_MOST(rel_err(cgot.data() + b * m, dft(row, {m}, 1)), FTOL);
    }
    CUFFT_EXPECT(cufftMakePlanMany64(plan, 1, mm, nullptr, 1, m, nullptr, 1, m, CUFFT_C2C, mb, &made),
                 CUFFT_INVALID_PLAN);  // made already
    CUFFT_CHECK(cufftDestroy(plan));

    // cufftXtMakePlanMany's D2Z, run by cufftXtExec (any direction: a real transform has its own)
    const int k = 20, kb = 2, khalf = k / 2 + 1;
    std::vector<double> dref;
    auto dx = random_real<double>(k * kb, dref);
    double *din = to_device(dx);
    cufftDoubleComplex *dspec;
    CHECK(cudaMalloc(&dspec, sizeof(cufftDoubleComplex) * khalf * kb));
    long long kk[1] = {k};
    CUFFT_CHECK(cufftCreate(&plan));
    CUFFT_CHECK(cufftXtGetSizeMany(plan, 1, kk, nullptr, 1, k, CUDA_R_64F, nullptr, 1, khalf, CUDA_C_64F, kb,
                                   &estimate, CUDA_C_64F));
    CUFFT_CHECK(cufftXtMakePlanMany(plan, 1, kk, nullptr, 1, k, CUDA_R_64F, nullptr, 1, khalf, CUDA_C_64F, kb,
                                    &made, CUDA_C_64F));
    CUFFT_CHECK(cufftXtExec(plan, din, dspec, CUFFT_FORWARD));
    auto dgot = to_host(dspec, khalf * kb);
    for (int b = 0; b < kb; b++) {
        std::vector<cd> row(dref.begin() + b * k, dref.begin() + (b + 1) * k);
        AT_MOST(rel_err(dgot.data() + b * khalf, half_spectrum(dft(row, {k}, -1), {k})), DTOL);
    }
    CUFFT_EXPECT(cufftExecR2C(plan, (float *)din, (cufftComplex *)dspec), CUFFT_INVALID_TYPE);
    CUFFT_CHECK(cufftDestroy(plan));

    cufftHandle bad;
    CUFFT_CHECK(cufftCreate(&bad));
    long long zero[1] = {0};
    CUFFT_EXPECT(cufftMakePlanMany64(bad, 1, zero, nullptr, 1, 1, nullptr, 1, 1, CUFFT_C2C, 1, &made),
                 CUFFT_INVALID_SIZE);
    CUFFT_EXPECT(cufftMakePlanMany64(bad, 4, mm, nullptr, 1, 1, nullptr, 1, 1, CUFFT_C2C, 1, &made),
                 CUFFT_INVALID_SIZE);
    CUFFT_EXPECT(cufftMakePlanMany64(bad, 1, mm, nullptr, 1, m, nullptr, 1, m, (cufftType)0x7f, 1, &made),
                 CUFFT_INVALID_TYPE);
    CUFFT_CHECK(cufftDestroy(bad));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFree(cdata));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dspec));
}

// cuFFT callbacks are device code of the program's, which rcuda's cuFFT (on
// the server) cannot link: refused by name with CUFFT_NOT_SUPPORTED (a bad
// plan is still CUFFT_INVALID_PLAN), and the plan works on without them.
static void callbacks() {
    const int n = 16;
    std::vector<cd> ref;
    auto x = random_complex<cufftComplex>(n, ref);
    cufftComplex *data = to_device(x);
    cufftHandle plan;
    CUFFT_CHECK(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
    void *routines[1] = {nullptr};
    CUFFT_EXPECT(cufftXtSetCallback(plan, routines, CUFFT_CB_LD_COMPLEX, nullptr), CUFFT_NOT_SUPPORTED);
    CUFFT_EXPECT(cufftXtSetCallbackSharedSize(plan, CUFFT_CB_LD_COMPLEX, 64), CUFFT_NOT_SUPPORTED);
    CUFFT_EXPECT(cufftXtClearCallback(plan, CUFFT_CB_ST_COMPLEX), CUFFT_NOT_SUPPORTED);
    const char fatbin[16] = {0};
    CUFFT_EXPECT(cufftXtSetJITCallback(plan, "load", fatbin, sizeof fatbin, CUFFT_CB_LD_COMPLEX, nullptr),
                 CUFFT_NOT_SUPPORTED);
    CUFFT_EXPECT(cufftXtSetCallbackSharedSize(plan + 1000, CUFFT_CB_LD_COMPLEX, 64), CUFFT_INVALID_PLAN);
    CUFFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
    AT_MOST(rel_err(to_host(data, n).data(), dft(ref, {n}, -1)), FTOL);
    CUFFT_CHECK(cufftDestroy(plan));
    CHECK(cudaFree(data));
}

int main(int argc, char **argv) {
    where_from("cufft", (void *)&cufftPlan1d);
    int version = 0;
    CUFFT_CHECK(cufftGetVersion(&version));
    REQUIRE(version >= 12000);
    seed_values(24);
    const Section<> sections[] = {
        {"plan1d_c2c", plan1d_c2c}, {"r2c_c2r_1d", r2c_c2r_1d}, {"double_1d", double_1d},
        {"plan2d", plan2d},         {"plan3d", plan3d},         {"plan_many", plan_many},
        {"make_plans", make_plans}, {"convolution", convolution}, {"errors", errors},
        {"xt_plans", xt_plans}, {"plans64", plans64}, {"callbacks", callbacks},
    };
    run_sections(argc, argv, sections);
    printf("PASSED cufft_transforms\n");
    return 0;
}
