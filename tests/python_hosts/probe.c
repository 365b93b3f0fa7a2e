/* A C extension that calls the CUDA runtime holding the GIL (it never
 * releases it), as many extensions do: tests/test_python_hosts.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cuda_runtime_api.h>

static PyObject *device_count(PyObject *self, PyObject *args)
{
    int count = -1;
    cudaError_t status = cudaGetDeviceCount(&count);
    return Py_BuildValue("ii", (int)status, count);
}

/* Copies `data` to the current device and back: (status, the bytes back). */
static PyObject *round_trip(PyObject *self, PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    void *device = NULL;
    PyObject *back = PyBytes_FromStringAndSize(NULL, data.len);
    cudaError_t status = back ? cudaMalloc(&device, data.len) : cudaErrorMemoryAllocation;
    if (status == cudaSuccess)
        status = cudaMemcpy(device, data.buf, data.len, cudaMemcpyHostToDevice);
    if (status == cudaSuccess)
        status = cudaMemcpy(PyBytes_AS_STRING(back), device, data.len, cudaMemcpyDeviceToHost);
    if (device)
        cudaFree(device);
    PyBuffer_Release(&data);
    if (!back)
        return NULL;
    PyObject *result = Py_BuildValue("iO", (int)status, back);
    Py_DECREF(back);
    return result;
}

static PyMethodDef methods[] = {
    {"device_count", device_count, METH_NOARGS, "cudaGetDeviceCount, GIL held"},
    {"round_trip", round_trip, METH_VARARGS, "cudaMalloc, cudaMemcpy both ways, cudaFree, GIL held"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cuda_probe", NULL, -1, methods};

PyMODINIT_FUNC PyInit_cuda_probe(void)
{
    return PyModule_Create(&module);
}
