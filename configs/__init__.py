"""The Hydra configs, installed as the package ``nmt.configs`` (pyproject.toml maps it to this
folder), so that ``nmt.runtime.CONFIG_DIR`` finds them through the package in any install."""
