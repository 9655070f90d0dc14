"""The Hydra configs, installed as the package ``nmt.configs`` (pyproject.toml maps it to this
folder), so that ``nmt.utils.CONFIG_DIR`` finds them through the package in any install."""
