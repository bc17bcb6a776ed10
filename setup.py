"""Packaging for tb-gradscope: the training hook and the TensorBoard plugin."""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent

setuptools.setup(
    name="tb-gradscope",
    version="0.1.0",
    description=(
        "See which subgraphs each loss updates: per-scope gradient flow, "
        "blocked edges and target-network drift in TensorBoard."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["tb_gradscope", "tb_gradscope.*"]),
    package_data={"tb_gradscope.plugin": ["static/*"]},
    # The read side (the tab, the CLI) needs neither framework: a recorder
    # imports its own when used, and says which extra to install if it is absent.
    install_requires=[
        "tensorboard>=2.16",
        "numpy",
        "google-crc32c>=1.5",  # event-file CRCs in C (core/crc.py)
        'tomli; python_version < "3.11"',
    ],
    extras_require={
        "tensorflow": ["tensorflow>=2.16"],
        "torch": ["torch>=2.4"],
        "test": [
            # Both recorders are tested in one venv (tests/conftest.py orders
            # their imports: torch._dynamo before tensorflow).
            "tensorflow>=2.16",
            "torch>=2.4",
            "pytest",
            "pytest-timeout",
            "pytest-xdist~=3.8",  # `make test` runs two workers (tests/conftest.py)
            "hypothesis",
            "playwright",
            # Legacy Keras 2 for the tf_keras / tf.compat.v1.layers tests; its
            # version tracks tensorflow's.
            "tf-keras~=2.21",
            # The zero-code PyTorch callbacks are tested on real training runs.
            "stable-baselines3~=2.9",
            "gymnasium~=1.4",
            "lightning~=2.6",
            # Lint and format (pyproject.toml); pinned: a formatter's output
            # changes between releases.
            "ruff==0.17.6",
        ],
        "gym": ["gymnasium"],
        "sb3": ["torch>=2.4", "stable-baselines3>=2.3"],
        "lightning": ["torch>=2.4", "lightning>=2.2"],
    },
    entry_points={
        "tensorboard_plugins": [
            "gradscope = tb_gradscope.plugin.loader:GradscopeLoader",
        ],
        "console_scripts": [
            "tb-gradscope = tb_gradscope.cli:main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
