#include "flywheel/weights/snapshot_stream.h"

#include <gtest/gtest.h>

#include <vector>

#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

// Narrower than the shared tiny model, with an untied head (one more tensor to stream).
ModelOptions TinyModel() {
  ModelOptions options = testing::TinyModelOptions();
  options.hidden_size = 16;
  options.intermediate_size = 24;
  options.tie_embeddings = false;
  return options;
}

std::vector<v1::WeightsChunk> Chunks(const NamedTensors& tensors, int64_t chunk_bytes,
                                     int64_t version = 5) {
  std::vector<v1::WeightsChunk> chunks;
  EXPECT_TRUE(ChunkTensors(version, tensors, chunk_bytes, [&](const v1::WeightsChunk& c) {
    chunks.push_back(c);
    return true;
  }));
  return chunks;
}

NamedTensors TinyTensors() {
  auto model = MakeTransformer(TinyModel());
  EXPECT_TRUE(model.ok()) << model.status();
  auto snapshot = MakeSnapshot(*model, 5);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  auto tensors = SnapshotTensors(**snapshot);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return *tensors;
}

absl::Status Feed(const std::vector<v1::WeightsChunk>& chunks, WeightsAssembler& assembler) {
  for (const v1::WeightsChunk& c : chunks) {
    if (absl::Status s = assembler.Add(c); !s.ok()) return s;
  }
  return assembler.Finish().status();
}

TEST(SnapshotStreamTest, ChunksAreBoundedAndReassembleBitExact) {
  const NamedTensors tensors = TinyTensors();
  const std::vector<v1::WeightsChunk> chunks = Chunks(tensors, 256);
  ASSERT_GT(chunks.size(), tensors.size());  // large tensors were cut
  EXPECT_EQ(chunks.front().manifest_size(), static_cast<int>(tensors.size()));
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_LE(chunks[i].data().size(), 256u);
    EXPECT_EQ(chunks[i].last(), i + 1 == chunks.size());
    if (i > 0) {
      EXPECT_EQ(chunks[i].manifest_size(), 0);
    }
  }
  WeightsAssembler assembler;
  for (const v1::WeightsChunk& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
  absl::StatusOr<NamedTensors> out = assembler.Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*out)[i].first, tensors[i].first);
    EXPECT_TRUE(torch::equal((*out)[i].second, tensors[i].second)) << tensors[i].first;
  }
  auto snapshot = SnapshotFromTensors(TinyModel(), assembler.version(), *out);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ((*snapshot)->version, 5);
}

// What a process expects: the parameters of its own model.
std::vector<WeightsTensorSpec> TinySpecs() {
  auto model = MakeTransformer(TinyModel());
  EXPECT_TRUE(model.ok()) << model.status();
  auto specs = ParameterSpecs(*model);
  EXPECT_TRUE(specs.ok()) << specs.status();
  return *specs;
}

TEST(SnapshotStreamTest, BfloatSixteenSnapshotsStreamAsBfloatSixteenAndOnlyToBfloatSixteen) {
  ModelOptions options = TinyModel();
  options.dtype = "bfloat16";
  auto model = MakeTransformer(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sent = MakeSnapshot(*model, 5);
  ASSERT_TRUE(sent.ok()) << sent.status();
  auto tensors = SnapshotTensors(**sent);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto specs = ParameterSpecs(ReceivingModel(options));
  ASSERT_TRUE(specs.ok()) << specs.status();
  WeightsAssembler assembler;
  assembler.Expect(*specs);
  ASSERT_TRUE(Feed(Chunks(*tensors, 256), assembler).ok());  // half the bytes of float32
  auto received = SnapshotFromTensors(options, 5, *tensors);
  ASSERT_TRUE(received.ok()) << received.status();
  for (const auto& item : (*received)->model->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kBFloat16) << item.key();
  }
  // An actor configured for float32 refuses them by name.
  WeightsAssembler float32;
  float32.Expect(TinySpecs());
  const absl::Status refused = Feed(Chunks(*tensors, 256), float32);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("BF16"), absl::string_view::npos) << refused;
}

TEST(SnapshotStreamTest, ExpectedManifestAcceptsTheSameModel) {
  WeightsAssembler assembler;
  assembler.Expect(TinySpecs());
  ASSERT_TRUE(Feed(Chunks(TinyTensors(), 256), assembler).ok());
}

TEST(SnapshotStreamTest, ManifestForAnotherModelIsRefusedBeforeAllocating) {
  std::vector<v1::WeightsChunk> chunks = Chunks(TinyTensors(), 256);
  // A manifest that declares the embedding as 2^20 x 2^20 float32 (4 TiB, within the checker's
  // per-tensor bound): allocating it would end the process; it must be refused by name first.
  v1::WeightsChunk& first = chunks.front();
  for (auto& info : *first.mutable_manifest()) {
    if (info.name() != "model.embed_tokens.weight") continue;
    info.clear_shape();
    info.add_shape(int64_t{1} << 20);
    info.add_shape(int64_t{1} << 20);
    info.set_byte_size((int64_t{1} << 40) * 4);
  }
  WeightsAssembler assembler;
  assembler.Expect(TinySpecs());
  const absl::Status status = assembler.Add(first);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("model.embed_tokens.weight: F32 [1048576, 1048576] but this "
                                  "model holds F32 ["),
            absl::string_view::npos)
      << status;
}

TEST(SnapshotStreamTest, ExpectedManifestNamesAMissingOrForeignTensor) {
  NamedTensors tensors = TinyTensors();
  {
    NamedTensors fewer(tensors.begin(), tensors.end() - 1);
    WeightsAssembler assembler;
    assembler.Expect(TinySpecs());
    const absl::Status status = Feed(Chunks(fewer, 256), assembler);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(tensors.back().first + ": missing"), absl::string_view::npos)
        << status;
  }
  {
    NamedTensors renamed = tensors;
    renamed[0].first = "model.layers.99.mlp.up_proj.weight";
    WeightsAssembler assembler;
    assembler.Expect(TinySpecs());
    const absl::Status status = Feed(Chunks(renamed, 256), assembler);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("layers.99.mlp.up_proj.weight: this model has no such"),
              absl::string_view::npos)
        << status;
  }
}

TEST(SnapshotStreamTest, TruncatedStreamNamesTheIncompleteTensor) {
  const std::vector<v1::WeightsChunk> chunks = Chunks(TinyTensors(), 256);
  std::vector<v1::WeightsChunk> cut(chunks.begin(), chunks.begin() + chunks.size() / 2);
  WeightsAssembler assembler;
  absl::Status status = Feed(cut, assembler);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("ended after"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("tensor model."), absl::string_view::npos) << status;
}

TEST(SnapshotStreamTest, GapsDuplicatesAndForeignVersionsAreRejected) {
  const std::vector<v1::WeightsChunk> chunks = Chunks(TinyTensors(), 256);
  {
    std::vector<v1::WeightsChunk> gap = chunks;
    gap.erase(gap.begin() + 1);
    WeightsAssembler assembler;
    absl::Status status = Feed(gap, assembler);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find("gap"), absl::string_view::npos) << status;
  }
  {
    std::vector<v1::WeightsChunk> twice = chunks;
    twice.insert(twice.begin() + 2, chunks[1]);
    WeightsAssembler assembler;
    EXPECT_EQ(Feed(twice, assembler).code(), absl::StatusCode::kDataLoss);
  }
  {
    std::vector<v1::WeightsChunk> mixed = chunks;
    mixed[2].set_version(6);
    WeightsAssembler assembler;
    absl::Status status = Feed(mixed, assembler);
    EXPECT_NE(status.message().find("of version 6"), absl::string_view::npos) << status;
  }
  {
    std::vector<v1::WeightsChunk> longer = chunks;
    longer[0].mutable_data()->append("xx");
    WeightsAssembler assembler;
    EXPECT_EQ(Feed(longer, assembler).code(), absl::StatusCode::kDataLoss);
  }
  {
    std::vector<v1::WeightsChunk> renamed = chunks;
    renamed[1].set_tensor_name("model.other");
    WeightsAssembler assembler;
    EXPECT_EQ(Feed(renamed, assembler).code(), absl::StatusCode::kDataLoss);
  }
  {
    std::vector<v1::WeightsChunk> no_manifest(chunks.begin() + 1, chunks.end());
    WeightsAssembler assembler;
    absl::Status status = Feed(no_manifest, assembler);
    EXPECT_NE(status.message().find("no manifest"), absl::string_view::npos) << status;
  }
  {
    std::vector<v1::WeightsChunk> after_last = chunks;
    after_last.push_back(chunks.back());
    WeightsAssembler assembler;
    absl::Status status = Feed(after_last, assembler);
    EXPECT_NE(status.message().find("after the last"), absl::string_view::npos) << status;
  }
}

TEST(SnapshotStreamTest, ManifestThatLiesAboutSizesIsRejected) {
  std::vector<v1::WeightsChunk> chunks = Chunks(TinyTensors(), 1 << 20);
  chunks[0].mutable_manifest(0)->set_byte_size(12);
  WeightsAssembler assembler;
  absl::Status status = assembler.Add(chunks[0]);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("byte_size 12"), absl::string_view::npos) << status;
  chunks[0].mutable_manifest(0)->set_dtype("F64");
  WeightsAssembler other;
  EXPECT_NE(other.Add(chunks[0]).message().find("unknown dtype"), absl::string_view::npos);
}

TEST(SnapshotStreamTest, TensorsOfAnotherModelAreRejectedNamingTheTensor) {
  const NamedTensors tensors = TinyTensors();
  ModelOptions wider = TinyModel();
  wider.hidden_size = 32;
  auto snapshot = SnapshotFromTensors(wider, 5, tensors);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_NE(snapshot.status().message().find("shape"), absl::string_view::npos)
      << snapshot.status();

  NamedTensors missing(tensors.begin() + 1, tensors.end());
  snapshot = SnapshotFromTensors(TinyModel(), 5, missing);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_NE(snapshot.status().message().find(tensors.front().first + ": missing"),
            absl::string_view::npos)
      << snapshot.status();

  NamedTensors extra = tensors;
  extra.emplace_back("model.extra.weight", torch::zeros({2}));
  snapshot = SnapshotFromTensors(TinyModel(), 5, extra);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_NE(snapshot.status().message().find("model.extra.weight"), absl::string_view::npos);

  NamedTensors half = tensors;
  half[0].second = half[0].second.to(torch::kBFloat16);
  snapshot = SnapshotFromTensors(TinyModel(), 5, half);
  ASSERT_FALSE(snapshot.ok());
  EXPECT_NE(snapshot.status().message().find("dtype"), absl::string_view::npos);
}

}  // namespace
}  // namespace flywheel
