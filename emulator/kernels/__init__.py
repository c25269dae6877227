"""The device's kernel library.

Compiled (Cython) modules, imported explicitly by their users so that importing
this package needs no compiled code:

* ``strided``     -- copy_cast (strided copy with dtype conversion), fill
* ``elementwise`` -- binary (add/sub/mul/div/maximum/minimum), unary (relu)
* ``gemm``        -- matmul (out = beta*C + alpha*A@B through host BLAS)
* ``random``      -- Philox4x32-10 uniform, normal, randint, bernoulli

Pure-Python modules: ``dtypes`` (the dtype codes of the kernel ABI) and
``library`` (kernel table and cost model).  All kernels take raw host
addresses plus shape and strides in elements.
"""
