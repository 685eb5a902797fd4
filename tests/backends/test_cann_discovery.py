"""CANN discovery on fake directory trees: search order, the three CMake-module layouts and CANN 9's
ASC package, versions, SoC detection from ``npu-smi info``, and the one-line reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.toolchain.discovery import (
    cann_candidates,
    cann_env,
    discover_ascend,
    explain_torch_npu_error,
    find_cann,
    npu_arch,
    parse_npu_smi,
    soc_from_name,
)

from fake_toolchains import CMAKE_LAYOUTS, NPU_SMI_910B2, make_cann, write_script


def test_search_order_env_then_home_then_system(tmp_path):
    env = {"ASCEND_INSTALL_PATH": "/opt/a", "ASCEND_HOME_PATH": "/opt/b"}
    labels = [label for label, _ in cann_candidates(env, tmp_path / "home", tmp_path / "sys")]
    assert labels == [
        "$ASCEND_INSTALL_PATH", "$ASCEND_INSTALL_PATH/ascend-toolkit/latest", "$ASCEND_INSTALL_PATH/cann",
        "$ASCEND_INSTALL_PATH/latest",
        "$ASCEND_HOME_PATH", "$ASCEND_HOME_PATH/ascend-toolkit/latest", "$ASCEND_HOME_PATH/cann",
        "$ASCEND_HOME_PATH/latest",
        "~/Ascend/ascend-toolkit/latest", "~/Ascend/cann",
        "/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann",
    ]


@pytest.mark.parametrize("winner", ["ASCEND_INSTALL_PATH", "ASCEND_HOME_PATH", "home", "system"])
def test_first_existing_root_wins(tmp_path, winner):
    home, system = tmp_path / "home", tmp_path / "sys"
    roots = {
        "ASCEND_INSTALL_PATH": tmp_path / "install-path/latest",
        "ASCEND_HOME_PATH": tmp_path / "home-path/latest",
        "home": home / "Ascend/ascend-toolkit/latest",
        "system": system / "usr/local/Ascend/ascend-toolkit/latest",
    }
    order = list(roots)
    for name in order[order.index(winner):]:  # the winner and every later candidate exist
        make_cann(roots[name])
    env = {"ASCEND_INSTALL_PATH": str(roots["ASCEND_INSTALL_PATH"]), "ASCEND_HOME_PATH": str(roots["ASCEND_HOME_PATH"])}
    install, tried = find_cann(env, home, system)
    assert install is not None and install.root == roots[winner]
    assert tried[-1] == install.found_by


def test_env_var_naming_an_install_folder_finds_the_toolkit_inside(tmp_path):
    make_cann(tmp_path / "Ascend/ascend-toolkit/latest")
    install, _ = find_cann({"ASCEND_HOME_PATH": str(tmp_path / "Ascend")}, tmp_path / "home", tmp_path / "sys")
    assert install.found_by == "$ASCEND_HOME_PATH/ascend-toolkit/latest"


@pytest.mark.parametrize("layout", sorted(CMAKE_LAYOUTS))
def test_each_cmake_module_layout_is_the_classic_flow(tmp_path, layout):
    root = make_cann(tmp_path / "sys/usr/local/Ascend/ascend-toolkit/latest", layout)
    install, _ = find_cann({}, tmp_path / "home", tmp_path / "sys", machine="x86_64")
    assert install.root == root
    assert install.flow == "ascendc_library"
    assert install.cmake_dir == root / CMAKE_LAYOUTS[layout]
    assert install.bisheng == root / "x86_64-linux/ccec_compiler/bin/bisheng"
    assert install.version == "8.0.RC3"
    assert install.problem == ""


def test_first_cmake_module_wins_when_several_exist(tmp_path):
    root = make_cann(tmp_path / "root", "tools")
    (root / CMAKE_LAYOUTS["compiler"]).mkdir(parents=True)
    (root / CMAKE_LAYOUTS["compiler"] / "ascendc.cmake").write_text("")
    install, _ = find_cann({"ASCEND_HOME_PATH": str(root)}, tmp_path / "home", tmp_path / "sys")
    assert install.cmake_dir == root / CMAKE_LAYOUTS["compiler"]


def test_cann9_layout_uses_the_asc_package(tmp_path):
    root = make_cann(tmp_path / "home/Ascend/cann", "asc", arch="aarch64", version="9.0.0", version_file="install.info")
    install, _ = find_cann({}, tmp_path / "home", tmp_path / "sys", machine="aarch64")
    assert install.root == root and install.found_by == "~/Ascend/cann"
    assert install.flow == "asc"
    assert install.cmake_dir == root / "aarch64-linux/lib64/cmake"
    assert install.arch == "aarch64"
    assert install.version == "9.0.0"


def test_classic_layout_is_preferred_over_asc_when_both_exist(tmp_path):
    root = make_cann(tmp_path / "root", "compiler")
    (root / "x86_64-linux/lib64/cmake/ASC").mkdir(parents=True)
    (root / "x86_64-linux/lib64/cmake/ASC/ASCConfig.cmake").write_text("")
    install, _ = find_cann({"ASCEND_HOME_PATH": str(root)}, tmp_path, tmp_path, machine="x86_64")
    assert install.flow == "ascendc_library"


def test_version_from_the_resolved_path_when_no_version_file(tmp_path):
    real = make_cann(tmp_path / "Ascend/ascend-toolkit/8.0.RC2", version_file="none")
    (tmp_path / "Ascend/ascend-toolkit/latest").symlink_to(real)
    install, _ = find_cann({}, tmp_path, tmp_path / "sys")
    assert install.version == "8.0.RC2"


def test_runtime_only_install_says_what_is_missing(tmp_path):
    root = make_cann(tmp_path / "root", "runtime")
    findings = discover_ascend({"ASCEND_HOME_PATH": str(root), "PATH": ""}, home=tmp_path, system_root=tmp_path,
                               probe_torch=False)
    assert findings.install.flow is None
    assert any("no Ascend C CMake module" in p and "compiler/tikcpp/ascendc_kernel_cmake" in p
               for p in findings.toolchain_problems)


def test_nothing_installed_lists_every_place_tried(tmp_path):
    findings = discover_ascend({"PATH": ""}, home=tmp_path / "home", system_root=tmp_path / "sys", probe_torch=False)
    problems = " | ".join(findings.toolchain_problems + findings.device_problems)
    assert "CANN not found (tried ~/Ascend/ascend-toolkit/latest, ~/Ascend/cann, " \
           "/usr/local/Ascend/ascend-toolkit/latest, /usr/local/Ascend/cann)" in problems
    assert "cmake not found" in problems
    assert "no NPU device: npu-smi not found" in problems


def test_npu_smi_names_and_soc():
    assert parse_npu_smi(NPU_SMI_910B2) == ["910B2", "910B2"]
    assert parse_npu_smi("| 0     310P3               | OK            | 12.5   45  0 / 0 |") == ["310P3"]
    assert soc_from_name("910B2") == "Ascend910B2"
    assert soc_from_name("Ascend910B3") == "Ascend910B3"
    assert [npu_arch(s) for s in ("Ascend310P3", "Ascend910B2", "Ascend910_9392", "Ascend950PR", "Ascend910")] == \
        ["dav-2002", "dav-2201", "dav-2201", "dav-3510", None]


def test_soc_from_npu_smi_and_cmake_present(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "root")
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_910B2}EOF\n")
    write_script(tool_bin / "cmake", "echo cmake version 3.28\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp")}
    findings = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    assert findings.soc == "Ascend910B2" and findings.soc_source == "npu-smi info"
    assert findings.toolchain_problems == [] and findings.device_problems == []


def test_soc_mismatch_between_setting_and_device(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "root")
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_910B2}EOF\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "EVOKERNEL_ASCEND_SOC": "Ascend910B3"}
    findings = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    assert any(p.startswith("SoC mismatch: EVOKERNEL_ASCEND_SOC is Ascend910B3 but the device is Ascend910B2")
               for p in findings.device_problems)


def test_soc_the_toolkit_does_not_support(tmp_path, bare_env, tool_bin):
    root = make_cann(tmp_path / "root", socs=("Ascend310P3",))
    write_script(tool_bin / "npu-smi", f"/bin/cat <<'EOF'\n{NPU_SMI_910B2}EOF\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root)}
    findings = discover_ascend(env, home=tmp_path, system_root=tmp_path, machine="x86_64", probe_torch=False)
    assert any("SoC mismatch" in p and "no platform config for Ascend910B2" in p for p in findings.toolchain_problems)


def test_cann_env_is_taken_from_set_env_sh(tmp_path):
    script = ('export ASCEND_HOME_PATH=/fake/latest\nexport ASCEND_OPP_PATH=/fake/latest/opp\n'
              'export LD_LIBRARY_PATH=/fake/latest/lib64:$LD_LIBRARY_PATH\nexport UNRELATED_THING=1\n'
              'export ASCEND_API_KEY=hidden\n')
    root = make_cann(tmp_path / "root", set_env=script)
    install, _ = find_cann({"ASCEND_INSTALL_PATH": str(root)}, tmp_path, tmp_path)
    assert install.set_env == (root / "set_env.sh").resolve()
    env = cann_env(install, {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/x"})
    assert env["ASCEND_HOME_PATH"] == "/fake/latest"
    assert env["ASCEND_OPP_PATH"] == "/fake/latest/opp"
    assert env["LD_LIBRARY_PATH"] == "/fake/latest/lib64:/x"
    assert "UNRELATED_THING" not in env
    # already sourced: nothing to add
    assert cann_env(install, {"ASCEND_HOME_PATH": "/a", "ASCEND_OPP_PATH": "/a/opp"}) == {}


def test_torch_npu_import_failures_become_one_line_fixes():
    assert "pip install 'evokernel[npu]'" in explain_torch_npu_error("No module named 'torch_npu'", "2.5.1")
    line = explain_torch_npu_error("ImportError: /x/torch_npu/_C.so: undefined symbol: _ZN3c10", "2.5.1")
    assert "does not match torch 2.5.1" in line
    assert "source <CANN>/set_env.sh" in explain_torch_npu_error("OSError: libascendcl.so: cannot open shared object")


def test_torch_npu_probe_runs_in_a_subprocess_without_autoload(tmp_path):
    """The probe runs a separate Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0; a stand-in Python records it."""
    fake_python = write_script(tmp_path / "python", 'case "$2" in *find_spec*) exit 0 ;; esac\n'
                               f'echo "AUTOLOAD=$TORCH_DEVICE_BACKEND_AUTOLOAD" > "{tmp_path}/seen"\n'
                               'echo \'EVOKERNEL-PROBE {"torch": "2.5.1", "error": "import torch_npu failed: '
                               'ImportError: undefined symbol: aclrtX"}\'\n')
    findings = discover_ascend({"PATH": ""}, home=tmp_path, system_root=tmp_path, python=str(fake_python))
    assert (tmp_path / "seen").read_text().strip() == "AUTOLOAD=0"
    assert any("does not match torch 2.5.1" in p for p in findings.device_problems)


def test_backend_toolchain_reports_both_halves(tmp_path, bare_env, tool_bin):
    from verifier.backends.ascend import AscendBackend

    root = make_cann(tmp_path / "root")
    write_script(tool_bin / "cmake", "true\n")
    env = {**bare_env, "ASCEND_HOME_PATH": str(root), "ASCEND_OPP_PATH": str(root / "opp")}
    tc = AscendBackend(env, home=str(tmp_path), system_root=str(tmp_path), machine="x86_64", probe_torch=False).toolchain()
    assert tc.toolchain_ok is True and tc.device_ok is False and tc.available is False
    assert tc.version == "CANN 8.0.RC3"
    assert tc.details["flow"] == "ascendc_library" and tc.details["found_by"] == "$ASCEND_HOME_PATH"
    assert "no NPU device" in tc.reason
    assert Path(tc.compiler).name == "bisheng"
