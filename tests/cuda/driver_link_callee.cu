// The other half of driver_link_caller.cu's link.
__device__ float twice(float value)
{
    return 2.0f * value;
}
