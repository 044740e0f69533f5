#include <gtest/gtest.h>

#include "flywheel/model/test_util.h"
#include "flywheel/rpc/test_certs.h"
#include "flywheel/weights/client.h"
#include "flywheel/weights/service.h"

namespace flywheel {
namespace {

ModelOptions TinyServedModel() { return testing::TinyModelOptions(/*seed=*/11); }

std::shared_ptr<const WeightSnapshot> Snapshot(int64_t version, uint64_t seed = 11) {
  ModelOptions options = TinyServedModel();
  options.seed = static_cast<int64_t>(seed);
  auto model = MakeTransformer(options);
  EXPECT_TRUE(model.ok()) << model.status();
  auto snapshot = MakeSnapshot(*model, version);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  return *snapshot;
}

std::unique_ptr<WeightsServer> Serve(const std::string& token = "",
                                     int64_t chunk_bytes = kDefaultWeightsChunkBytes) {
  WeightsServerOptions options;
  options.security = RpcSecurity::Token(token);
  options.max_chunk_bytes = chunk_bytes;
  auto server = WeightsServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

void ExpectSameWeights(const WeightSnapshot& a, const WeightSnapshot& b) {
  const auto pa = a.model->named_parameters();
  const auto pb = b.model->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    const torch::Tensor* other = pb.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), *other)) << item.key();
  }
}

TEST(WeightsServiceTest, SnapshotRoundTripsBitExactInBoundedChunks) {
  auto server = Serve("", 1000);
  const auto published = Snapshot(3);
  ASSERT_TRUE(server->Publish(*published).ok());
  auto client = WeightsClient::Connect(server->address()).value();
  auto version = client->GetVersion();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->version(), 3);
  EXPECT_FALSE(version->finished());

  auto fetched = client->Fetch(-1, TinyServedModel());
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_NE(fetched->snapshot, nullptr);
  EXPECT_EQ(fetched->snapshot->version, 3);
  EXPECT_EQ(fetched->bytes, version->total_bytes());
  EXPECT_GE(fetched->chunks, fetched->bytes / 1000);  // the server's bound, not the client's
  ExpectSameWeights(*published, *fetched->snapshot);

  // The fetched model decodes exactly as the published one.
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::tensor({{1, 5, 9, 2}}, torch::kInt64);
  const torch::Tensor positions = torch::arange(4).unsqueeze(0);
  const torch::Tensor allowed = torch::ones({1, 4, 4}, torch::kBool).tril();
  EXPECT_TRUE(torch::equal(
      published->model->Logits(published->model->Hidden(tokens, positions, allowed, nullptr)),
      fetched->snapshot->model->Logits(
          fetched->snapshot->model->Hidden(tokens, positions, allowed, nullptr))));
}

TEST(WeightsServiceTest, FetchSendsOnlyNewerVersions) {
  auto server = Serve();
  auto client = WeightsClient::Connect(server->address()).value();
  EXPECT_EQ(client->GetVersion()->version(), -1);
  EXPECT_EQ(client->Fetch(-1, TinyServedModel()).status().code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE(server->Publish(*Snapshot(4)).ok());
  auto same = client->Fetch(4, TinyServedModel());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->snapshot, nullptr);
  EXPECT_EQ(same->latest_version, 4);
  EXPECT_EQ(same->bytes, 0);

  const auto newer = Snapshot(6, 12);
  ASSERT_TRUE(server->Publish(*newer).ok());
  auto fetched = client->Fetch(4, TinyServedModel());
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_NE(fetched->snapshot, nullptr);
  EXPECT_EQ(fetched->snapshot->version, 6);
  ExpectSameWeights(*newer, *fetched->snapshot);

  EXPECT_FALSE(server->Publish(*Snapshot(5)).ok());  // versions never go back
  server->SetFinished();
  EXPECT_TRUE(client->GetVersion()->finished());
}

TEST(WeightsServiceTest, AuthTokenIsRequiredLikeTheBuffers) {
  auto server = Serve("s3cret");
  ASSERT_TRUE(server->Publish(*Snapshot(1)).ok());
  auto anonymous = WeightsClient::Connect(server->address()).value();
  EXPECT_EQ(anonymous->GetVersion().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->Fetch(-1, TinyServedModel()).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto wrong = WeightsClient::Connect(server->address(), RpcSecurity::Token("guess")).value();
  EXPECT_EQ(wrong->GetVersion().status().code(), absl::StatusCode::kUnauthenticated);
  auto right = WeightsClient::Connect(server->address(), RpcSecurity::Token("s3cret")).value();
  auto fetched = right->Fetch(-1, TinyServedModel());
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->snapshot->version, 1);
}

TEST(WeightsServiceTest, FetchesOverMutualTls) {
  testing::TestCerts certs;
  ASSERT_TRUE(certs.ok()) << "make_test_certs.sh failed (openssl?)";
  WeightsServerOptions options;
  auto server_security = LoadRpcSecurity(certs.Server(/*mutual=*/true));
  ASSERT_TRUE(server_security.ok()) << server_security.status();
  options.security = *server_security;
  options.security.auth_token = "s3cret";
  auto server = WeightsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Publish(*Snapshot(4)).ok());
  auto client_security = LoadRpcSecurity(certs.Client("ca.pem", "client"));
  ASSERT_TRUE(client_security.ok()) << client_security.status();
  client_security->auth_token = "s3cret";
  auto fetched = WeightsClient::Connect((*server)->address(), *client_security)
                     .value()
                     ->Fetch(-1, TinyServedModel());
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->snapshot->version, 4);
  auto plaintext = WeightsClient::Connect((*server)->address(), RpcSecurity::Token("s3cret"));
  EXPECT_EQ(plaintext.value()->GetVersion(absl::Seconds(2)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(WeightsServiceTest, ModelOfAnotherShapeIsAClearError) {
  auto server = Serve();
  ASSERT_TRUE(server->Publish(*Snapshot(2)).ok());
  ModelOptions other = TinyServedModel();
  other.intermediate_size = 64;
  auto fetched = WeightsClient::Connect(server->address()).value()->Fetch(-1, other);
  ASSERT_FALSE(fetched.ok());
  // Refused from the manifest, before the stream's tensors are allocated.
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kInvalidArgument) << fetched.status();
  EXPECT_NE(fetched.status().message().find(
                "mlp.gate_proj.weight: F32 [48, 32] but this model holds F32 [64, 32]"),
            absl::string_view::npos)
      << fetched.status();
}

// A server whose stream breaks off or is corrupted after `keep` chunks.
class BrokenWeightsService final : public v1::WeightsService::Service {
 public:
  enum class Fault { kTruncate, kCorruptOffset };
  BrokenWeightsService(NamedTensors tensors, size_t keep, Fault fault)
      : tensors_(std::move(tensors)), keep_(keep), fault_(fault) {}
  grpc::Status FetchWeights(grpc::ServerContext*, const v1::FetchWeightsRequest*,
                            grpc::ServerWriter<v1::WeightsChunk>* writer) override {
    size_t sent = 0;
    ChunkTensors(7, tensors_, 512, [&](const v1::WeightsChunk& chunk) {
      if (sent == keep_) {
        if (fault_ == Fault::kTruncate) return false;
        v1::WeightsChunk bad = chunk;
        bad.set_offset(bad.offset() + 4);
        writer->Write(bad);
        return false;
      }
      ++sent;
      return writer->Write(chunk);
    });
    return grpc::Status::OK;  // ends "cleanly": only the content says it is broken
  }

 private:
  NamedTensors tensors_;
  size_t keep_;
  Fault fault_;
};

absl::Status FetchFromBroken(BrokenWeightsService::Fault fault) {
  auto tensors = SnapshotTensors(*Snapshot(7));
  EXPECT_TRUE(tensors.ok());
  BrokenWeightsService service(*tensors, 5, fault);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto fetched = WeightsClient::Connect("127.0.0.1:" + std::to_string(port))
                     .value()
                     ->Fetch(-1, TinyServedModel());
  server->Shutdown();
  EXPECT_FALSE(fetched.ok());
  return fetched.status();
}

TEST(WeightsServiceTest, TruncatedStreamIsRejected) {
  absl::Status status = FetchFromBroken(BrokenWeightsService::Fault::kTruncate);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("ended after"), absl::string_view::npos) << status;
}

TEST(WeightsServiceTest, CorruptStreamIsRejected) {
  absl::Status status = FetchFromBroken(BrokenWeightsService::Fault::kCorruptOffset);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("gap"), absl::string_view::npos) << status;
}

TEST(WeightsServiceTest, UnreachableServiceNamesTheAddress) {
  auto client = WeightsClient::Connect("127.0.0.1:1").value();
  auto version = client->GetVersion(absl::Seconds(2));
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.status().message().find("127.0.0.1:1"), absl::string_view::npos)
      << version.status();
}

}  // namespace
}  // namespace flywheel
