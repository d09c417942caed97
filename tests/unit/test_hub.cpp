// loader/hub: names, the cache's location and layout (no network: download_snapshot is tested
// end to end against a fake hub in tests/hub/).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "loader/hub.h"

namespace fs = std::filesystem;
using namespace miniinfer::hub;

TEST(Hub, RepoIds) {
    EXPECT_TRUE(is_repo_id("Qwen/Qwen3-0.6B"));
    EXPECT_TRUE(is_repo_id("org_1/name.v2"));
    EXPECT_FALSE(is_repo_id("Qwen3-0.6B"));
    EXPECT_FALSE(is_repo_id("/abs/path"));
    EXPECT_FALSE(is_repo_id("./rel"));
    EXPECT_FALSE(is_repo_id("a/b/c"));
    EXPECT_FALSE(is_repo_id("a--b/c"));
    EXPECT_FALSE(is_repo_id("a/b..c"));
    EXPECT_FALSE(is_repo_id("~/model"));
    EXPECT_EQ(repo_folder_name("Qwen/Qwen3-0.6B"), "models--Qwen--Qwen3-0.6B");
}

TEST(Hub, CacheDirFollowsTheEnvironment) {
    setenv("HF_HUB_CACHE", "/x/cache", 1);
    setenv("HF_HOME", "/y/home", 1);
    EXPECT_EQ(cache_dir(), fs::path("/x/cache"));
    unsetenv("HF_HUB_CACHE");
    EXPECT_EQ(cache_dir(), fs::path("/y/home/hub"));
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/z", 1);
    EXPECT_EQ(cache_dir(), fs::path("/z/.cache/huggingface/hub"));
    setenv("HF_HUB_OFFLINE", "1", 1);
    EXPECT_TRUE(offline());
    setenv("HF_HUB_OFFLINE", "0", 1);
    EXPECT_FALSE(offline());
    unsetenv("HF_HUB_OFFLINE");
}

TEST(Hub, SnapshotsAndMissingFiles) {
    const fs::path repo = fs::temp_directory_path() / "mi_test_hub" / "models--o--n";
    fs::remove_all(repo.parent_path());
    const std::string commit(40, 'a');
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / "main") << commit << "\n";
    EXPECT_EQ(cached_commit(repo, "main"), commit);
    EXPECT_EQ(cached_commit(repo, std::string(40, 'b')), std::string(40, 'b'));
    EXPECT_FALSE(cached_commit(repo, "v1").has_value());

    const fs::path snap = repo / "snapshots" / commit;
    fs::create_directories(snap);
    EXPECT_EQ(missing_files(snap), (std::vector<std::string>{"config.json", "*.safetensors"}));
    std::ofstream(snap / "config.json") << "{}";
    std::ofstream(snap / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}})";
    std::ofstream(snap / "m-1.safetensors") << "x";
    EXPECT_EQ(missing_files(snap), (std::vector<std::string>{"m-2.safetensors"}));
    fs::remove_all(repo.parent_path());
}

TEST(Hub, ExistingDirectoryAndNonNamesPassThrough) {
    EXPECT_EQ(resolve_model(MINIINFER_FIXTURES "/qwen3-tiny"),
              fs::path(MINIINFER_FIXTURES "/qwen3-tiny"));
    EXPECT_EQ(resolve_model("no-such-dir"), fs::path("no-such-dir"));
}
